/* trainlog.c — the training CSV logs (see trainlog.h). */
#include "train/trainlog.h"

#include <stdlib.h>

int sp_tr_log_truncate(const char *path, long step, sp_err *err) {
    char *text = NULL;
    size_t n = 0;
    if (!sp_file_exists(path)) return 0;
    if (sp_read_file(path, &text, &n, err)) return -1;
    size_t keep = 0;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && text[e] != '\n') e++;
        if (e == n) break; /* a torn last line */
        long s = strtol(text + i, NULL, 10);
        if (i > 0 && s > step) break; /* the header is always kept */
        keep = e + 1;
        i = e + 1;
    }
    int rc = sp_write_file_atomic(path, text, keep, err);
    free(text);
    return rc;
}
