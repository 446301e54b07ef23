/*
 * ledger_schema.sql.h - the ledger's tables (docs/ledger.md explains every
 * column). Every table is WITHOUT ROWID with a natural primary key, so its
 * content, and `sqlite3 .dump` of it, depend only on the messages applied,
 * not on the order partitions were read in: a rebuilt ledger dumps the
 * same bytes as the live one.
 */
#ifndef CNX_LEDGER_SCHEMA_SQL_H
#define CNX_LEDGER_SCHEMA_SQL_H

/*
 * Versions. `meta.schema` is the version readers check (cnx-verify reads
 * schema 1): it changes only when a change breaks them. `meta.revision`
 * counts additive changes within it (tables, indexes, nullable columns);
 * the controller brings an older file up to its revision when it opens it
 * (ledger_migrate_sql, one step per revision) and refuses a newer one.
 *   revision 1: the first schema (no `revision` row).
 *   revision 2: releases.manifest (what a `reused` decision reuses), the
 *               `held` and `manifest_facts` tables, the attempts_by_stage
 *               index.
 *   revision 3: attempts.run (each execution of an attempt its own row),
 *               the `seen` table (signed messages applied, for replays).
 *   revision 4: lineage.archive (a row archived out of the ledger stays as
 *               a stub naming its archive file), the `archives` table.
 */
#define CNX_LEDGER_SCHEMA_VERSION 1
#define CNX_LEDGER_SCHEMA_REVISION 4

static const char ledger_schema_sql[] =
    "CREATE TABLE IF NOT EXISTS meta(\n"
    "  key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS positions(\n"
    "  topic TEXT NOT NULL, partition INTEGER NOT NULL,\n"
    "  next_offset INTEGER NOT NULL,\n"
    "  PRIMARY KEY(topic, partition)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS rejected(\n"
    "  topic TEXT NOT NULL, partition INTEGER NOT NULL,\n"
    "  offset INTEGER NOT NULL, error TEXT NOT NULL,\n"
    "  PRIMARY KEY(topic, partition, offset)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS requests(\n"
    "  id TEXT PRIMARY KEY, workflow TEXT NOT NULL,\n"
    "  workflow_digest TEXT NOT NULL, workflow_json TEXT NOT NULL,\n"
    "  dataset TEXT NOT NULL, roi TEXT NOT NULL,\n"
    "  submitted TEXT NOT NULL, deadline TEXT NOT NULL,\n"
    "  reuse INTEGER NOT NULL, submitter TEXT,\n"
    "  state TEXT NOT NULL,\n"
    "  accepted TEXT, plan TEXT, error TEXT,\n"
    "  tasks INTEGER, eta TEXT, slo TEXT NOT NULL DEFAULT 'ok',\n"
    "  urgent INTEGER NOT NULL DEFAULT 0, progress_at TEXT,\n"
    "  finished TEXT, outcome TEXT, summary TEXT) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS stages(\n"
    "  request TEXT NOT NULL, stage TEXT NOT NULL, seq INTEGER NOT NULL,\n"
    "  worker TEXT NOT NULL, kind TEXT NOT NULL,\n"
    "  kernel_version INTEGER NOT NULL, parameters TEXT NOT NULL,\n"
    "  tasks INTEGER NOT NULL, region TEXT NOT NULL,\n"
    "  input_layer TEXT NOT NULL, input_scale TEXT NOT NULL,\n"
    "  res_x REAL NOT NULL, res_y REAL NOT NULL, res_z REAL NOT NULL,\n"
    "  output_layer TEXT NOT NULL, output_scale TEXT NOT NULL,\n"
    "  retry_budget INTEGER NOT NULL, lease_s REAL NOT NULL,\n"
    "  PRIMARY KEY(request, stage)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS namespaces(\n"
    "  layer TEXT NOT NULL, scale TEXT NOT NULL, worker TEXT NOT NULL,\n"
    "  kernel_version INTEGER NOT NULL, parameters TEXT NOT NULL,\n"
    "  first_request TEXT NOT NULL,\n"
    "  PRIMARY KEY(layer, scale)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS tasks(\n"
    "  request TEXT NOT NULL, idx INTEGER NOT NULL, stage TEXT NOT NULL,\n"
    "  x0 INTEGER NOT NULL, y0 INTEGER NOT NULL, z0 INTEGER NOT NULL,\n"
    "  x1 INTEGER NOT NULL, y1 INTEGER NOT NULL, z1 INTEGER NOT NULL,\n"
    "  deps_left INTEGER NOT NULL, state TEXT NOT NULL,\n"
    "  task_key TEXT, releases INTEGER NOT NULL DEFAULT 0,\n"
    "  last_attempt INTEGER NOT NULL DEFAULT 0, lane TEXT,\n"
    "  last_seen TEXT, done_at TEXT, manifest TEXT,\n"
    "  reused INTEGER NOT NULL DEFAULT 0, error TEXT,\n"
    "  PRIMARY KEY(request, idx)) WITHOUT ROWID;\n"
    "CREATE INDEX IF NOT EXISTS tasks_by_key ON tasks(task_key, request,\n"
    "  idx);\n"
    "CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks(request, state,\n"
    "  deps_left);\n"
    "CREATE TABLE IF NOT EXISTS releases(\n"
    "  request TEXT NOT NULL, idx INTEGER NOT NULL,\n"
    "  attempt INTEGER NOT NULL, type TEXT NOT NULL,\n"
    "  task_key TEXT NOT NULL, lane TEXT NOT NULL, time TEXT NOT NULL,\n"
    "  reason TEXT NOT NULL, manifest TEXT,\n"
    "  PRIMARY KEY(request, idx, attempt, type)) WITHOUT ROWID;\n"
    "CREATE INDEX IF NOT EXISTS releases_by_key ON releases(task_key,\n"
    "  request, idx);\n"
    "CREATE TABLE IF NOT EXISTS attempts(\n"
    "  task_key TEXT NOT NULL, request TEXT NOT NULL,\n"
    "  attempt INTEGER NOT NULL, worker TEXT NOT NULL,\n"
    "  run TEXT NOT NULL DEFAULT '',\n"
    "  stage TEXT NOT NULL, state TEXT NOT NULL,\n"
    "  started TEXT, finished TEXT,\n"
    "  cpu_s REAL, wall_s REAL, read_s REAL, kernel_s REAL, write_s REAL,\n"
    "  bytes_read INTEGER, bytes_written INTEGER, voxels INTEGER,\n"
    "  outputs INTEGER, manifest TEXT,\n"
    "  error_code TEXT, error TEXT, retriable INTEGER,\n"
    "  PRIMARY KEY(task_key, request, attempt, worker, run)) WITHOUT ROWID;\n"
    "CREATE INDEX IF NOT EXISTS attempts_by_manifest ON attempts(manifest);\n"
    "CREATE INDEX IF NOT EXISTS attempts_by_stage ON attempts(stage,\n"
    "  started);\n"
    "CREATE TABLE IF NOT EXISTS seen(\n"
    "  digest TEXT NOT NULL, topic TEXT NOT NULL,\n"
    "  partition INTEGER, offset INTEGER,\n"
    "  PRIMARY KEY(digest, topic)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS held(\n"
    "  topic TEXT NOT NULL, partition INTEGER NOT NULL,\n"
    "  offset INTEGER NOT NULL, request TEXT NOT NULL,\n"
    "  task_key TEXT NOT NULL, manifest TEXT NOT NULL,\n"
    "  message TEXT NOT NULL,\n"
    "  PRIMARY KEY(topic, partition, offset)) WITHOUT ROWID;\n"
    "CREATE INDEX IF NOT EXISTS held_by_manifest ON held(manifest);\n"
    "CREATE INDEX IF NOT EXISTS held_by_task ON held(request, task_key);\n"
    "CREATE TABLE IF NOT EXISTS manifest_facts(\n"
    "  manifest TEXT PRIMARY KEY, stage TEXT NOT NULL, box TEXT NOT NULL,\n"
    "  subjects TEXT NOT NULL) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS lineage(\n"
    "  partition INTEGER NOT NULL, offset INTEGER NOT NULL,\n"
    "  envelope_digest TEXT NOT NULL, task_key TEXT, request TEXT,\n"
    "  stage TEXT, invocation TEXT, signer TEXT, verified INTEGER NOT NULL,\n"
    "  error TEXT, envelope TEXT NOT NULL,\n"
    "  prev TEXT NOT NULL, row_digest TEXT NOT NULL, archive TEXT,\n"
    "  PRIMARY KEY(partition, offset)) WITHOUT ROWID;\n"
    "CREATE INDEX IF NOT EXISTS lineage_by_digest ON lineage(\n"
    "  envelope_digest);\n"
    "CREATE TABLE IF NOT EXISTS outputs(\n"
    "  task_key TEXT NOT NULL, object TEXT NOT NULL,\n"
    "  digest TEXT NOT NULL, manifest TEXT NOT NULL,\n"
    "  PRIMARY KEY(task_key, object)) WITHOUT ROWID;\n"
    "CREATE INDEX IF NOT EXISTS outputs_by_object ON outputs(object);\n"
    "CREATE TABLE IF NOT EXISTS violations(\n"
    "  kind TEXT NOT NULL, task_key TEXT NOT NULL, object TEXT NOT NULL,\n"
    "  expected TEXT NOT NULL, got TEXT NOT NULL, request TEXT NOT NULL,\n"
    "  stage TEXT NOT NULL, evidence TEXT NOT NULL,\n"
    "  PRIMARY KEY(kind, task_key, object, got, request)) WITHOUT ROWID;\n"
    "CREATE INDEX IF NOT EXISTS violations_by_task ON violations(\n"
    "  task_key, request);\n"
    "CREATE TABLE IF NOT EXISTS slo_events(\n"
    "  request TEXT NOT NULL, type TEXT NOT NULL, time TEXT NOT NULL,\n"
    "  eta TEXT, deadline TEXT NOT NULL,\n"
    "  PRIMARY KEY(request, type)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS archives(\n"
    "  request TEXT PRIMARY KEY, file TEXT NOT NULL, time TEXT NOT NULL,\n"
    "  tasks INTEGER NOT NULL, lineage INTEGER NOT NULL,\n"
    "  stubs INTEGER NOT NULL) WITHOUT ROWID;\n"
    "CREATE VIEW IF NOT EXISTS stage_costs AS\n"
    "  SELECT s.request, s.stage, s.worker, s.tasks,\n"
    "    count(a.task_key) AS attempts_succeeded,\n"
    "    coalesce(sum(a.voxels), 0) AS voxels,\n"
    "    coalesce(sum(a.cpu_s), 0) AS cpu_s,\n"
    "    coalesce(sum(a.wall_s), 0) AS wall_s,\n"
    "    coalesce(sum(a.bytes_read), 0) AS bytes_read,\n"
    "    coalesce(sum(a.bytes_written), 0) AS bytes_written,\n"
    "    coalesce(sum(a.voxels), 0) / 1e6 / nullif(sum(a.wall_s), 0)\n"
    "      AS mvx_per_s,\n"
    "    coalesce(sum(a.cpu_s), 0) / 3600.0 AS core_hours,\n"
    "    coalesce(sum(a.voxels), 0) * s.res_x * s.res_y * s.res_z * 1e-18\n"
    "      AS mm3,\n"
    "    coalesce(sum(a.bytes_written), 0) / 1e9 /\n"
    "      nullif(coalesce(sum(a.voxels), 0) * s.res_x * s.res_y * s.res_z\n"
    "             * 1e-18, 0) AS gb_per_mm3\n"
    "  FROM stages s\n"
    "  LEFT JOIN tasks t ON t.request = s.request AND t.stage = s.stage\n"
    "  LEFT JOIN attempts a ON a.task_key = t.task_key\n"
    "    AND a.request = t.request AND a.state = 'succeeded'\n"
    "  GROUP BY s.request, s.stage;\n";

/*
 * Migrations: ledger_migrate_sql[r] brings revision r to r + 1, run in
 * one transaction after ledger_schema_sql (which has already created the
 * new tables and indexes). Revision 1 -> 2: a `reused` decision now names
 * the manifest it reuses; rows applied before take the manifest of the
 * task of another request that was done under the same key.
 */
__attribute__((unused))
static const char *const ledger_migrate_sql[CNX_LEDGER_SCHEMA_REVISION] = {
    NULL,
    "ALTER TABLE releases ADD COLUMN manifest TEXT;\n"
    "UPDATE releases SET manifest = (SELECT t.manifest FROM tasks t\n"
    "  WHERE t.task_key = releases.task_key AND t.request != releases.request\n"
    "  AND t.state = 'done' AND t.manifest IS NOT NULL\n"
    "  ORDER BY t.done_at, t.request LIMIT 1) WHERE type = 'reused';\n",
    /* 2 -> 3: attempts gains `run` in its key (rows before have run '').
     * Copied out and back, not renamed: the stage_costs view names it.
     * The key's columns lead the table: SQLite 3.40's integrity_check
     * misreads a WITHOUT ROWID table whose key is not a prefix. */
    "CREATE TEMP TABLE attempts_r2 AS SELECT * FROM attempts;\n"
    "DROP TABLE attempts;\n"
    "CREATE TABLE attempts(\n"
    "  task_key TEXT NOT NULL, request TEXT NOT NULL,\n"
    "  attempt INTEGER NOT NULL, worker TEXT NOT NULL,\n"
    "  run TEXT NOT NULL DEFAULT '',\n"
    "  stage TEXT NOT NULL, state TEXT NOT NULL,\n"
    "  started TEXT, finished TEXT,\n"
    "  cpu_s REAL, wall_s REAL, read_s REAL, kernel_s REAL, write_s REAL,\n"
    "  bytes_read INTEGER, bytes_written INTEGER, voxels INTEGER,\n"
    "  outputs INTEGER, manifest TEXT,\n"
    "  error_code TEXT, error TEXT, retriable INTEGER,\n"
    "  PRIMARY KEY(task_key, request, attempt, worker, run)) WITHOUT ROWID;\n"
    "INSERT INTO attempts SELECT task_key, request, attempt, worker, '',\n"
    "  stage, state, started, finished, cpu_s, wall_s, read_s, kernel_s,\n"
    "  write_s, bytes_read, bytes_written, voxels, outputs, manifest,\n"
    "  error_code, error, retriable FROM attempts_r2;\n"
    "DROP TABLE attempts_r2;\n"
    "CREATE INDEX IF NOT EXISTS attempts_by_manifest ON attempts(manifest);\n"
    "CREATE INDEX IF NOT EXISTS attempts_by_stage ON attempts(stage,\n"
    "  started);\n",
    /* 3 -> 4: a lineage row archived out of the ledger stays as a stub
     * naming its archive file (the `archives` table is new). */
    "ALTER TABLE lineage ADD COLUMN archive TEXT;\n",
};

#endif
