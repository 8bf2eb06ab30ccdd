/* fuzz_shards.c — one regen shard through sp_tr_shardset_open: the input's first line is
 * shard.json, the rest model.safetensors, written to DIR/shard_00000/ (DIR: a per-process folder
 * under /dev/shm, else /tmp). An accepted shard's ids, sequence table and hidden rows are read
 * in full and checked against the invariants the trainer relies on. */
#include <sys/stat.h>

#include "fuzz.h"
#include "train/shards.h"

static char dir[256], sdir[320], json_path[400], st_path[400];

static void cleanup(void) { sp_remove_tree(dir); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/specula-fuzz-shards-%d", base, (int)getpid());
    snprintf(sdir, sizeof sdir, "%s/shard_00000", dir);
    snprintf(json_path, sizeof json_path, "%s/shard.json", sdir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", sdir);
    sp_err err;
    if (sp_mkdir_p(sdir, &err)) {
        fprintf(stderr, "fuzz_shards: %s\n", err.msg);
        exit(1);
    }
    atexit(cleanup);
    return 0;
}

static void put(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t jn = nl ? (size_t)(nl - data) : size;
    put(json_path, data, jn);
    put(st_path, nl ? nl + 1 : data + size, nl ? size - jn - 1 : 0);
    tr_shardset s;
    sp_err err;
    if (sp_tr_shardset_open(&s, dir, 1000, &err) == 0) {
        for (int i = 0; i < s.n_shards; i++) {
            const tr_shard *sh = &s.shards[i];
            int64_t sum = 0;
            for (int k = 0; k < sh->n_seq; k++) {
                if (sh->seq_lens[k] < 1 || sh->resp_starts[k] < 0 || sh->resp_starts[k] > sh->seq_lens[k] ||
                    sh->seq_off[k] != sum)
                    abort();
                sum += sh->seq_lens[k];
            }
            if (sum != sh->n_tokens) abort();
            for (int64_t k = 0; k < sh->n_tokens; k++)
                if (sh->ids[k] < 0 || sh->ids[k] >= 1000) abort();
            fuzz_touch(sh->hidden, (size_t)sh->n_tokens * s.H * 2);
            fuzz_touch(sh->hidden_ml, (size_t)sh->n_tokens * s.m * s.H * 2);
        }
        sp_tr_shardset_close(&s);
    }
    return 0;
}
