/*
 * ledger_sql_int.h - SQL fragments over the ledger that more than one
 * reader states the same way (docs/ledger.md). Each is a condition on the
 * row `t` of `tasks`, with ?1 the request's id.
 */
#ifndef CNX_LEDGER_SQL_INT_H
#define CNX_LEDGER_SQL_INT_H

/* A repeated task: not reused, and its key was done by another request
 * by the time this one was accepted. The controller's `finished` summary
 * and cnx-report count with it. */
#define CNX_LEDGER_SQL_REPEATED                                            \
    "t.reused = 0 AND EXISTS (SELECT 1 FROM tasks u WHERE u.task_key = "   \
    "t.task_key AND u.request != t.request AND u.state = 'done' AND "      \
    "u.done_at <= (SELECT accepted FROM requests WHERE id = ?1))"

/* A repeated task that gave the same bytes again: done, and no violation
 * recorded against it. */
#define CNX_LEDGER_SQL_IDENTICAL                                           \
    "t.state = 'done' AND NOT EXISTS (SELECT 1 FROM violations v WHERE "   \
    "v.task_key = t.task_key AND v.request = t.request)"

#endif
