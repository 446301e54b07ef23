/*
 * fuzz_task.c - the task message (cnx_task_parse), what every worker
 * reads from Kafka. A task that parses must serialise (cnx_task_to_json)
 * to text that parses again to the same key: the key names the task's
 * outputs everywhere, so a round trip that changes it is a finding.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/task.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cnx_task *task = NULL, *again = NULL;
    char *json = NULL, *material = NULL;
    if (cnx_task_parse(&task, (const char *)data, size) != 0)
        return 0;
    for (size_t i = 0; i < task->ninputs; i++) {
        const cnx_task_input *in = &task->inputs[i];
        if (cnx_task_input_get(task, in->role) != in)
            abort();
        if (in->nobjects > 0 &&
            cnx_task_expected(task, in->role, in->objects[0].name) == NULL)
            abort();
    }
    if (cnx_task_to_json(task, &json) != 0 ||
        cnx_task_key_material(task, &material) != 0)
        abort();
    if (cnx_task_parse(&again, json, strlen(json)) != 0 ||
        strcmp(again->key, task->key) != 0)
        abort(); /* canonical form does not parse back to the same task */
    free(material);
    free(json);
    cnx_task_free(again);
    cnx_task_free(task);
    return 0;
}
