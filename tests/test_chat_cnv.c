/* test_chat_cnv.c — the interactive chat (`specula generate -cnv`, src/cli/chat_cli.c) through
 * the binary, on the embedded model (a code model that never ends its turn: a reply runs until
 * the context or an interrupt):
 * - Ctrl-C in a terminal (a pty driven by python3's pty module): Ctrl-C mid-reply ends the reply
 *   and the chat goes on to the next prompt and a second reply; Ctrl-C at the prompt ends the
 *   chat with exit status 130;
 * - a conversation longer than the context goes on after a notice that the oldest turns were
 *   dropped;
 * - --stop in -cnv ends the reply before the stop string (unprinted) and the chat goes on;
 *   --json with -cnv is refused; -c above the model's context is capped with a note. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char cli[4096], dir[128];
static const char *DEF = "models/default/target";
static char out[1 << 16], err[1 << 16];

/* run cmd with stdin from the text in, stderr into err[]; the exit status */
static int chat(const char *in, const char *flags) {
    char path[256], cmd[8192];
    snprintf(path, sizeof path, "%s/in.txt", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs(in, f), fclose(f);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -cnv -t 2 --temp 0 %s <%s/in.txt 2>%s/err.txt", cli, DEF, flags, dir, dir);
    int rc = harness_run(cmd, out, sizeof out);
    snprintf(path, sizeof path, "%s/err.txt", dir);
    f = fopen(path, "r");
    size_t k = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[k] = 0;
    if (f) fclose(f);
    return rc;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* the pty script: prompt, reply, Ctrl-C mid-reply, prompt again, a second reply, Ctrl-C again,
 * Ctrl-C at the prompt; prints "exit N" and the number of "[reply interrupted" notices. Each wait
 * lasts up to CHAT_WAIT seconds (default 150: an ASan build on a slow machine loads and decodes
 * slowly); a wait that runs out kills the chat and names the step and what the terminal showed. */
static const char *PTY_PY =
    "import os, pty, sys, time, select\n"
    "argv = sys.argv[1:]\n"
    "pid, fd = pty.fork()\n"
    "if pid == 0:\n"
    "    os.execv(argv[0], argv)\n"
    "buf = b''\n"
    "def until(done, secs):\n"
    "    global buf\n"
    "    end = time.time() + secs\n"
    "    while time.time() < end:\n"
    "        if done(): return True\n"
    "        r, _, _ = select.select([fd], [], [], 0.1)\n"
    "        if r:\n"
    "            try: d = os.read(fd, 65536)\n"
    "            except OSError: return False\n"
    "            if not d: return False\n"
    "            buf += d\n"
    "    return False\n"
    "def grown(n): k = len(buf); return lambda: len(buf) >= k + n\n"
    "def seen(what, k): return lambda: buf.count(what) >= k\n"
    "step = 'start'\n"
    "def want(name, done, secs):\n"
    "    global step\n"
    "    if step not in ('start', 'ok'): return False\n"
    "    step = 'ok' if until(done, secs) else name\n"
    "    return step == 'ok'\n"
    "W = float(os.environ.get('CHAT_WAIT', '150'))\n"
    "want('first prompt', seen(b'> ', 1), W)\n"
    "os.write(fd, b'hello\\n')\n"
    "want('first reply', grown(300), W)\n"
    "os.write(fd, b'\\x03')\n"
    "want('first interrupt', seen(b'[reply interrupted', 1), W)\n"
    "want('second prompt', seen(b'> ', 2), W)\n"
    "os.write(fd, b'more please\\n')\n"
    "want('second reply', grown(300), W)\n"
    "os.write(fd, b'\\x03')\n"
    "want('second interrupt', seen(b'[reply interrupted', 2), W)\n"
    "want('third prompt', seen(b'> ', 3), W)\n"
    "ok = step == 'ok'\n"
    "if ok: os.write(fd, b'\\x03')\n"
    "else: os.kill(pid, 9)\n"
    "until(lambda: False, 0.5)\n"
    "_, st = os.waitpid(pid, 0)\n"
    "sys.stdout.write('steps %s exit %d interrupted %d tokens-lines %d\\n' % (ok, os.waitstatus_to_exitcode(st),\n"
    "    buf.count(b'[reply interrupted'), buf.count(b' tokens, ')))\n"
    "if not ok: sys.stdout.write('timed out waiting for the %s; the terminal showed:\\n%s\\n' % (step, buf[-2000:].decode('utf-8', 'replace')))\n";

static void test_ctrl_c(void) {
    char path[256], cmd[8192];
    snprintf(path, sizeof path, "%s/drive_chat.py", dir); /* not pty.py: it would shadow the module */
    FILE *f = fopen(path, "w");
    if (f) fputs(PTY_PY, f), fclose(f);
    /* -c 4096: an uninterrupted reply would run for about 4000 tokens, long past the script's waits */
    snprintf(cmd, sizeof cmd, "timeout 600 python3 %s %s generate -m %s -cnv -c 4096 -t 2 --temp 0 2>&1", path, cli, DEF);
    int rc = harness_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "steps True exit 130 interrupted 2 tokens-lines 2"), "pty chat (rc %d): %s", rc, out);
}

static void test_context_shift(void) {
    int rc = chat("def fib(n):\nmore\nand more\n", "-c 200");
    CHECK(rc == 0, "exit %d: %s", rc, err);
    CHECK(count(err, "[context full: dropped the ") >= 1, "no context-full notice: %s", err);
    CHECK(count(err, " tokens, ") == 3, "not three replies: %s", err);
}

static void test_stop_and_flags(void) {
    /* a reply without --stop, then a stop string from its middle */
    CHECK(chat("hello\n", "-c 160") == 0 && strlen(out) > 40, "reference reply: %s", err);
    char stop[8] = "";
    const char *p = out + 20;
    for (; *p && *(p + 3); p++)
        if (p[0] != ' ' && p[0] != '\n' && p[1] != '\n' && p[2] != '\n' && p[2] != ' ' &&
            !strchr("'\\%", p[0]) && !strchr("'\\%", p[1]) && !strchr("'\\%", p[2]))
            break;
    snprintf(stop, sizeof stop, "%.3s", p);
    size_t before = (size_t)(strstr(out, stop) - out); /* the reply ends at its first occurrence */
    CHECK(strlen(stop) == 3, "no stop string in: %s", out);
    char flags[64];
    snprintf(flags, sizeof flags, "-c 160 --stop '%s'", stop);
    /* the first reply ends right before the stop string: the reference's text up to it, then the newline */
    char ref[1 << 12];
    snprintf(ref, sizeof ref, "%.*s\n", (int)before, out);
    int rc = chat("hello\nmore\n", flags);
    CHECK(rc == 0, "--stop: exit %d: %s", rc, err);
    CHECK(!strncmp(out, ref, strlen(ref)), "--stop '%s': the reply is not the reference cut before it:\n%s\n---\n%s", stop,
          out, ref);
    CHECK(count(err, " tokens, ") == 2, "--stop: the chat did not go on to the second turn: %s", err);
    CHECK(chat("", "--json") == 2 && strstr(err, "--json does not go with -cnv"), "--json -cnv: %s", err);
    CHECK(chat("", "-c 99999") == 0 && strstr(err, "-c 99999 is above the model's context (8192): using 8192"),
          "-c cap: %s", err);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(cli, sizeof cli, "%s", argv[0]);
    char *slash = strrchr(cli, '/');
    if (slash) snprintf(slash, sizeof cli - (size_t)(slash - cli), "/../specula");
    snprintf(dir, sizeof dir, "/tmp/specula_test_chat_cnv_%d", (int)getpid());
    char cmd[256];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0 || access(cli, X_OK) != 0) {
        printf("skipped: no specula binary at %s\n", cli);
        return harness_done("test_chat_cnv");
    }
    if (system("python3 -c 'import pty' 2>/dev/null") == 0) RUN(test_ctrl_c);
    else printf("test_ctrl_c skipped: no python3 with the pty module\n");
    RUN(test_context_shift);
    RUN(test_stop_and_flags);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return harness_done("test_chat_cnv");
}
