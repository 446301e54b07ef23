/*
 * task_check - parse task messages with the C parser and say, per file,
 * "accept <key>" or "reject <message>". The schema test compares these
 * verdicts with an independent JSON Schema validator's.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cnx/error.h"
#include "cnx/task.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        char *buf;
        long n;
        cnx_task *task = NULL;
        if (f == NULL) {
            fprintf(stderr, "task_check: cannot open %s\n", argv[i]);
            return 2;
        }
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc((size_t)n + 1);
        if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "task_check: cannot read %s\n", argv[i]);
            return 2;
        }
        fclose(f);
        if (cnx_task_parse(&task, buf, (size_t)n) == 0)
            printf("%s\taccept\t%s\n", argv[i], task->key);
        else
            printf("%s\treject\t%s\n", argv[i], cnx_error_last()->message);
        cnx_task_free(task);
        free(buf);
    }
    return 0;
}
