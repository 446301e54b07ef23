/*
 * annotation_tool - write a synapse table (JSON lines, cnx/synapse_io.h)
 * as an annotation collection (cnx/annotation.h) into a directory, for
 * tests/integration/synapse_annotations_sharded.sh: collections larger
 * than the workflow's demo gives, read back by tests/py/annotations_ref.py.
 *
 *   annotation_tool TABLE OUT NX,NY,NZ [auto|on|off]
 *
 * The space is [0, N) voxels per axis at 8 x 8 x 40 nm. Writes
 * OUT/<object name> for every object. Exit status 0, 1 on a failure (one
 * line on stderr), 2 on bad arguments.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cnx/annotation.h"
#include "cnx/error.h"
#include "cnx/synapse_io.h"

static int fail(const char *what)
{
    const cnx_error *e = cnx_error_last();
    fprintf(stderr, "annotation_tool: %s: %s\n", what,
            e != NULL && e->message[0] ? e->message : strerror(errno));
    return 1;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        if (buf != NULL) {
            buf[n] = '\0';
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    cnx_annotation_layout layout = CNX_ANNOTATION_AUTO;
    cnx_annotation_space sp = {{8, 8, 40}, {0, 0, 0}, {0, 0, 0}};
    cnx_annotation_objects o = {NULL, 0};
    cnx_synapse *s = NULL;
    size_t len = 0, n = 0;
    long long nx, ny, nz;
    char *text;
    int rc = 0;

    if (argc < 4 || argc > 5 ||
        sscanf(argv[3], "%lld,%lld,%lld", &nx, &ny, &nz) != 3) {
        fprintf(stderr, "usage: annotation_tool TABLE OUT NX,NY,NZ "
                        "[auto|on|off]\n");
        return 2;
    }
    if (argc == 5)
        layout = strcmp(argv[4], "on") == 0    ? CNX_ANNOTATION_SHARDED
                 : strcmp(argv[4], "off") == 0 ? CNX_ANNOTATION_UNSHARDED
                                               : CNX_ANNOTATION_AUTO;
    sp.upper[0] = nx;
    sp.upper[1] = ny;
    sp.upper[2] = nz;
    text = slurp(argv[1], &len);
    if (text == NULL)
        return fail(argv[1]);
    if (cnx_synapse_table_parse(text, len, argv[1], &s, &n) != 0)
        rc = fail(argv[1]);
    else if (cnx_annotation_build_layout(s, n, &sp, layout, &o) != 0)
        rc = fail("build");
    for (size_t i = 0; i < o.count && rc == 0; i++) {
        char path[4096], *slash;
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s", argv[2], o.items[i].name);
        slash = strrchr(path, '/');
        *slash = '\0';
        mkdir(argv[2], 0755);
        mkdir(path, 0755);
        *slash = '/';
        f = fopen(path, "wb");
        if (f == NULL ||
            fwrite(o.items[i].data, 1, o.items[i].len, f) != o.items[i].len)
            rc = fail(path);
        if (f != NULL && fclose(f) != 0 && rc == 0)
            rc = fail(path);
    }
    printf("annotation_tool: %zu synapses, %zu objects\n", n, o.count);
    cnx_annotation_objects_free(&o);
    free(s);
    free(text);
    return rc;
}
