/*
 * worker_io.c - what a stage sees of the world while it runs one task.
 *
 * Reads go through cnx_stage_read, which refuses any chunk the task does
 * not name and checks every chunk it reads against the task's digest, so a
 * stage cannot depend on bytes its manifest does not record. Writes go
 * through cnx_stage_write / cnx_stage_put (write-once) and are recorded
 * with their digests for the manifest. One io per task, used by the one
 * thread that runs the stage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "worker_int.h"

int cnx__stage_io_init(cnx_stage_io *io, const cnx_task *task)
{
    int rc;
    memset(io, 0, sizeof(*io));
    io->task = task;
    io->output_scale = -1;
    cnx_object_list_init(&io->read);
    cnx_object_list_init(&io->written);
    for (size_t i = 0; i < task->ninputs; i++) {
        /* An input is a store; it is also a layer when it has an info
         * (a tile set has none and is read with cnx_stage_get). */
        rc = cnx_store_open(&io->stores[i], task->inputs[i].layer);
        if (rc == 0)
            rc = cnx_layer_open(&io->inputs[i], task->inputs[i].layer);
        if (rc == CNX_ENOTFOUND) {
            int exists = 1;
            rc = cnx_store_exists(io->stores[i], "info", &exists);
            if (rc == 0 && exists)
                rc = cnx_layer_open(&io->inputs[i], task->inputs[i].layer);
        }
        if (rc != 0)
            return cnx_error_wrap("input %s", task->inputs[i].role);
    }
    rc = cnx_layer_open(&io->output, task->output_layer);
    if (rc != 0)
        return cnx_error_wrap("output layer");
    io->output_scale = cnx_info_find_scale(cnx_layer_get_info(io->output),
                                           task->output_scale);
    return 0;
}

void cnx__stage_io_dispose(cnx_stage_io *io)
{
    for (size_t i = 0; i < CNX_TASK_MAX_INPUTS; i++) {
        cnx_layer_free(io->inputs[i]);
        cnx_store_free(io->stores[i]);
    }
    cnx_layer_free(io->output);
    cnx_object_list_dispose(&io->read);
    cnx_object_list_dispose(&io->written);
    memset(io, 0, sizeof(*io));
}

static int input_index(const cnx_stage_io *io, const char *role)
{
    for (size_t i = 0; i < io->task->ninputs; i++)
        if (strcmp(io->task->inputs[i].role, role) == 0)
            return (int)i;
    return -1;
}

cnx_layer *cnx_stage_input_layer(cnx_stage_io *io, const char *role)
{
    int i = input_index(io, role);
    return i < 0 ? NULL : io->inputs[i];
}

cnx_layer *cnx_stage_output_layer(cnx_stage_io *io)
{
    return io->output;
}

int cnx_stage_output_scale(cnx_stage_io *io)
{
    /* The stage may have added the scale since the layer was opened. */
    io->output_scale = cnx_info_find_scale(cnx_layer_get_info(io->output),
                                           io->task->output_scale);
    return io->output_scale;
}

struct expect_ctx {
    const cnx_task *task;
    const char *role;
};

static const char *expect_digest(void *ctx, const char *name)
{
    const struct expect_ctx *e = ctx;
    return cnx_task_expected(e->task, e->role, name);
}

int cnx_stage_read(cnx_stage_io *io, const char *role, const cnx_box *box,
                   cnx_volume **out)
{
    const cnx_task_input *in = cnx_task_input_get(io->task, role);
    int i = input_index(io, role);
    const cnx_layer_info *info;
    struct expect_ctx ectx = {io->task, role};
    cnx_object_list got;
    int64_t lo[3], hi[3], g[3];
    cnx_grid grid;
    int s, rc;
    double t0 = cnx_now();

    *out = NULL;
    if (in == NULL || i < 0)
        return cnx_error_set(CNX_ESCHEMA, 0, "task has no input '%s'", role);
    if (io->inputs[i] == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "input %s: %s is not a layer (no info)", role,
                             in->layer);
    info = cnx_layer_get_info(io->inputs[i]);
    s = cnx_info_find_scale(info, in->scale);
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "input %s: layer has no scale '%s'", role,
                             in->scale);
    /* Every chunk the box touches must be named by the task. */
    grid = cnx_info_grid(info, s);
    cnx_grid_chunk_range(&grid, box, lo, hi);
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++)
        for (g[1] = lo[1]; g[1] < hi[1]; g[1]++)
            for (g[0] = lo[0]; g[0] < hi[0]; g[0]++) {
                cnx_box cbox = cnx_grid_chunk_box(&grid, g);
                char name[256];
                rc = cnx_layer_chunk_name(info, s, &cbox, name, sizeof(name));
                if (rc != 0)
                    return rc;
                if (cnx_task_expected(io->task, role, name) == NULL)
                    return cnx_error_set(CNX_ESCHEMA, 0,
                                         "input %s: object %s is read but "
                                         "not listed in the task",
                                         role, name);
            }
    cnx_object_list_init(&got);
    rc = cnx_layer_read(io->inputs[i], s, box, 0, expect_digest, &ectx, &got,
                        out);
    for (size_t k = 0; rc == 0 && k < got.count; k++) {
        char full[sizeof(io->read.items[0].name)];
        int n = snprintf(full, sizeof(full), "%s/%s", in->layer,
                         got.items[k].name);
        int dup = 0;
        if (n < 0 || (size_t)n >= sizeof(full)) {
            rc = cnx_error_set(CNX_ERANGE, 0, "input name too long: %s",
                               got.items[k].name);
            break;
        }
        io->bytes_read += got.items[k].bytes;
        for (size_t j = 0; j < io->read.count && !dup; j++)
            dup = strcmp(io->read.items[j].name, full) == 0;
        if (!dup)
            rc = cnx_object_list_add(&io->read, full, got.items[k].digest);
    }
    cnx_object_list_dispose(&got);
    io->read_s += cnx_now() - t0;
    if (rc != 0) {
        cnx_volume_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Read name from input i, checked against want, and record it. */
static int get_checked(cnx_stage_io *io, int i, const char *name,
                       const char *want, size_t max_len, uint8_t **data,
                       size_t *len)
{
    const cnx_task_input *in = &io->task->inputs[i];
    char full[sizeof(io->read.items[0].name)];
    double t0 = cnx_now();
    int rc, n;

    *data = NULL;
    *len = 0;
    n = snprintf(full, sizeof(full), "%s/%s", in->layer, name);
    if (n < 0 || (size_t)n >= sizeof(full))
        return cnx_error_set(CNX_ERANGE, 0, "input name too long: %s", name);
    rc = cnx_store_get_verified(io->stores[i], name, want, max_len, data, len);
    if (rc == 0)
        rc = cnx_object_list_add(&io->read, full, want);
    if (rc == 0)
        io->bytes_read += *len;
    io->read_s += cnx_now() - t0;
    if (rc != 0) {
        free(*data);
        *data = NULL;
        *len = 0;
    }
    return rc;
}

int cnx_stage_get(cnx_stage_io *io, const char *role, const char *name,
                  size_t max_len, uint8_t **data, size_t *len)
{
    const char *want = cnx_task_expected(io->task, role, name);
    int i = input_index(io, role);

    *data = NULL;
    *len = 0;
    if (i < 0)
        return cnx_error_set(CNX_ESCHEMA, 0, "task has no input '%s'", role);
    if (want == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "input %s: object %s is read but not listed in "
                             "the task",
                             role, name);
    return get_checked(io, i, name, want, max_len, data, len);
}

int cnx_stage_get_expect(cnx_stage_io *io, const char *role, const char *name,
                         const char *digest, size_t max_len, uint8_t **data,
                         size_t *len)
{
    int i = input_index(io, role);
    *data = NULL;
    *len = 0;
    if (i < 0)
        return cnx_error_set(CNX_ESCHEMA, 0, "task has no input '%s'", role);
    if (digest == NULL || !cnx_digest_valid(digest))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "input %s: object %s: no valid digest to check "
                             "it against",
                             role, name);
    return get_checked(io, i, name, digest, max_len, data, len);
}

int cnx_stage_write(cnx_stage_io *io, const cnx_volume *vol)
{
    size_t before = io->written.count;
    double t0 = cnx_now();
    int s = cnx_stage_output_scale(io), rc;
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "output layer has no scale '%s'",
                             io->task->output_scale);
    rc = cnx_layer_write(io->output, s, vol, &io->written);
    for (size_t k = before; k < io->written.count; k++)
        io->bytes_written += io->written.items[k].bytes;
    io->write_s += cnx_now() - t0;
    return rc;
}

int cnx_stage_put(cnx_stage_io *io, const char *name, const void *data,
                  size_t len)
{
    char digest[CNX_DIGEST_LEN];
    double t0 = cnx_now();
    int rc = cnx_store_put(cnx_layer_store(io->output), name, data, len,
                           digest);
    if (rc == 0)
        rc = cnx_object_list_add(&io->written, name, digest);
    if (rc == 0) {
        io->written.items[io->written.count - 1].bytes = len;
        io->bytes_written += len;
    }
    io->write_s += cnx_now() - t0;
    return rc;
}

void cnx_stage_add_voxels(cnx_stage_io *io, int64_t voxels)
{
    io->voxels += voxels;
}
