/* test_trainlog.c — the training logs' resume rule (src/train/trainlog.c): rows after the
 * checkpoint's step and a torn last line are dropped, the header always kept. */
#include <unistd.h>

#include "harness.h"
#include "train/trainlog.h"

static int truncated_to(const char *text, long step, const char *expect) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/specula_trainlog_%d.csv", (int)getpid());
    sp_err err = {0};
    if (sp_write_file_atomic(path, text, strlen(text), &err)) return 0;
    int ok = sp_tr_log_truncate(path, step, &err) == 0;
    char *got = NULL;
    size_t n = 0;
    ok = ok && sp_read_file(path, &got, &n, &err) == 0 && n == strlen(expect) && !memcmp(got, expect, n);
    if (!ok) fprintf(stderr, "  step %ld: got [%.*s]\n", step, (int)n, got ? got : "");
    free(got);
    unlink(path);
    return ok;
}

static void test_truncate(void) {
    const char *log = "step,loss\n0,9.5\n1,8.25\n2,7.0\n3,6.5\n";
    CHECK(truncated_to(log, 2, "step,loss\n0,9.5\n1,8.25\n2,7.0\n"), "rows after step 2 kept");
    CHECK(truncated_to(log, 0, "step,loss\n0,9.5\n"), "step 0");
    CHECK(truncated_to(log, 9, log), "later step changed the file");
    CHECK(truncated_to("step,loss\n0,9.5\n1,8.2", 5, "step,loss\n0,9.5\n"), "torn last line kept");
    CHECK(truncated_to("step,lo", 5, ""), "torn header kept");
    sp_err err = {0};
    CHECK(sp_tr_log_truncate("/tmp/specula_trainlog_missing.csv", 3, &err) == 0, "missing file: %s", err.msg);
}

int main(void) {
    RUN(test_truncate);
    return harness_done("test_trainlog");
}
