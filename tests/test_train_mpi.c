/* test_train_mpi.c — `mpirun -np 2 specula train` matches one process with the same global
 * batch (within reduction-order tolerance; anchors 3 per sequence, so a rank boundary cuts
 * shared-context groups; an EAGLE-3 drafter too), and `mpirun -np 2 specula regen` splits the shards
 * between the ranks and writes the same shards as one process. Runs the specula binary of this
 * build (next to tests/); skipped, and says so, when the build has no MPI or mpirun is missing. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/newmodel.h"
#include "formats/safetensors.h"
#include "harness.h"
#include "train/dist.h"

static char root[256], bin[512];

static void compare_masters(const char *d1, const char *d2);

static void test_mpi_matches_one_process(void) {
    char target[400], corpus[400], s1[400], s2[400], args[2048], p1[512], p2[512];
    snprintf(target, sizeof target, "%s/target", root);
    snprintf(corpus, sizeof corpus, "%s/c.jsonl", root);
    snprintf(s1, sizeof s1, "%s/s1", root);
    snprintf(s2, sizeof s2, "%s/s2", root);
    sp_err err;
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 1, .n_threads = 2};
    CHECK(sp_newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    FILE *f = fopen(corpus, "w");
    for (int i = 0; i < 12; i++) fprintf(f, "{\"ids\": [1, %d, %d, %d, %d], \"resp_start\": 5}\n", 100 + i, 7, 300 + i, 7);
    fclose(f);
    /* regen: one process vs two ranks (3 shards of 4 records) */
    snprintf(args, sizeof args, "-m %s --data %s --generate 24 --shard-records 4 -q -t 1 -o", target, corpus);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s regen %s %s 2>/dev/null", bin, args, s1);
    CHECK(system(cmd) == 0, "regen np 1");
    snprintf(cmd, sizeof cmd, "OMPI_MCA_rmaps_base_oversubscribe=1 ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root -np 2 %s regen %s %s 2>/dev/null", bin, args, s2);
    CHECK(system(cmd) == 0, "regen np 2");
    for (int s = 0; s < 3; s++) {
        snprintf(p1, sizeof p1, "%s/shard_%05d/model.safetensors", s1, s);
        snprintf(p2, sizeof p2, "%s/shard_%05d/model.safetensors", s2, s);
        CHECK(harness_same_file(p1, p2), "shard %d differs between 1 and 2 ranks", s);
    }
    /* train: same global batch of 8 anchors, 1 vs 2 ranks */
    snprintf(args, sizeof args, "--arch dspark -m %s --data %s --steps 12 --batch 8 --anchors-per-seq 3 --block-size 4 "
             "--layers 1 --markov-rank 16 --ctx 16 --lr 3e-3 -q -t 1 -o", target, s1);
    snprintf(cmd, sizeof cmd, "%s train %s %s/t1 2>/dev/null", bin, args, root);
    CHECK(system(cmd) == 0, "train np 1");
    snprintf(cmd, sizeof cmd, "OMPI_MCA_rmaps_base_oversubscribe=1 ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root -np 2 %s train %s %s/t2 2>/dev/null", bin, args, root);
    CHECK(system(cmd) == 0, "train np 2");
    compare_masters("t1", "t2");
}

/* an EAGLE-3 drafter (8-layer target, regen --taps eagle3): 1 vs 2 ranks, same global batch */
static void test_mpi_eagle3(void) {
    char target[400], corpus[400], s1[400], args[2048], cmd[4096];
    snprintf(target, sizeof target, "%s/target8", root);
    snprintf(corpus, sizeof corpus, "%s/c8.jsonl", root);
    snprintf(s1, sizeof s1, "%s/s8", root);
    sp_err err;
    const char *sets[] = {"num_hidden_layers=8"};
    newmodel_opts o = {.arch = "qwen3", .preset = "tiny", .seed = 1, .n_threads = 2, .sets = sets, .n_sets = 1};
    CHECK(sp_newmodel_write(target, &o, &err) == 0, "%s", err.msg);
    FILE *f = fopen(corpus, "w");
    for (int i = 0; i < 8; i++) fprintf(f, "{\"ids\": [1, %d, %d, %d, %d], \"resp_start\": 5}\n", 100 + i, 7, 300 + i, 7);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s regen -m %s --data %s --generate 24 --taps eagle3 -q -t 1 -o %s 2>/dev/null", bin,
             target, corpus, s1);
    CHECK(system(cmd) == 0, "regen --taps eagle3");
    snprintf(args, sizeof args, "--arch eagle3 -m %s --data %s --steps 6 --batch 4 --block-size 3 --window 8 "
             "--draft-vocab 48 --lr 3e-3 -q -t 1 -o", target, s1);
    snprintf(cmd, sizeof cmd, "%s train %s %s/e1 2>/dev/null", bin, args, root);
    CHECK(system(cmd) == 0, "train eagle3 np 1");
    snprintf(cmd, sizeof cmd, "OMPI_MCA_rmaps_base_oversubscribe=1 ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root -np 2 %s train %s %s/e2 2>/dev/null", bin, args, root);
    CHECK(system(cmd) == 0, "train eagle3 np 2");
    compare_masters("e1", "e2");
}

/* the master weights of ROOT/d1 and ROOT/d2 agree within reduction-order tolerance */
static void compare_masters(const char *d1, const char *d2) {
    char p1[512], p2[512];
    sp_err err;
    snprintf(p1, sizeof p1, "%s/%s/optimizer.safetensors", root, d1);
    snprintf(p2, sizeof p2, "%s/%s/optimizer.safetensors", root, d2);
    st_set *a = NULL, *b = NULL;
    if (sp_st_open_file(&a, p1, &err) || sp_st_open_file(&b, p2, &err)) {
        CHECK(0, "%s", err.msg);
    } else {
        double worst = 0, scale = 0;
        int n = 0;
        for (int i = 0; i < sp_st_count(a); i++) {
            const st_tensor *ta = sp_st_at(a, i), *tb = sp_st_find(b, ta->name);
            if (strncmp(ta->name, "master.", 7) != 0) continue;
            CHECK(tb && tb->numel == ta->numel, "%s missing", ta->name);
            if (!tb) continue;
            const float *x = ta->data, *y = tb->data;
            for (int64_t j = 0; j < ta->numel; j++) {
                worst = fmax(worst, fabs(x[j] - y[j]));
                scale = fmax(scale, fabs(x[j]));
            }
            n++;
        }
        printf("  np 2 vs np 1: max |dw| %.3g over %d tensors (max |w| %.3g)\n", worst, n, scale);
        CHECK(n > 5 && worst < 1e-4 * fmax(1, scale), "weights differ by %g", worst);
    }
    sp_st_close(a);
    sp_st_close(b);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(root, sizeof root, "/tmp/specula_test_train_mpi_%d", (int)getpid());
    /* build/tests/test_train_mpi -> build/specula */
    snprintf(bin, sizeof bin, "%s", argv[0]);
    char *slash = strrchr(bin, '/');
    if (slash) *slash = 0;
    slash = strrchr(bin, '/');
    if (slash) strcpy(slash + 1, "specula");
    else snprintf(bin, sizeof bin, "../specula");
    if (!sp_tr_dist_available() || system("command -v mpirun >/dev/null 2>&1") != 0 || access(bin, X_OK) != 0) {
        printf("skipped: %s\n", !sp_tr_dist_available() ? "built without MPI" : "no mpirun or no specula binary");
        return harness_done("test_train_mpi");
    }
    RUN(test_mpi_matches_one_process);
    RUN(test_mpi_eagle3);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return harness_done("test_train_mpi");
}
