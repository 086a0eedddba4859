/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_job.c - job plugins (weir/job.h) and the weir command: the gate as a
 * pure function; loading a plugin in this process (which exports libweir,
 * like the weir command) twice and getting identical graphs, then running
 * it; refusals of a missing file, a non-ELF file, damaged ELF files, a
 * library without the identity note, and plugins claiming another
 * fingerprint / toolchain / target, refused before any of their code (a
 * constructor) runs;
 * and `weir run` / `weir lint` spawned as a process: exit codes and the
 * messages users see; `weir submit` / `jobs` / `cancel` the same way, their
 * usage and exit codes, and end to end against a stand-in coordinator.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "cluster/proto.h"
#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/job.h"
#include "weir/net.h"
#include "weir/rt.h"

extern char **environ;

#define PLUGIN(name) WEIR_TEST_PLUGIN_DIR "/" name ".so"

/* ---- the gate, pure ------------------------------------------------------------------- */

TEST(gate_names_every_difference)
{
    const weir_abi_id *self = weir_abi_self();
    CHECK_EQ(strlen(self->fingerprint), 64);
    char msg[1024];
    CHECK_EQ(weir_abi_check(self, self, msg, sizeof(msg)), 0);
    CHECK_STR(msg, "");
    weir_abi_id other = {"ffff", self->version + 1, "linux-mips", "othercc/tsan"};
    CHECK_EQ(weir_abi_check(self, &other, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, "ABI version differs");
    CHECK_HAS(msg, "ABI fingerprint differs: plugin ffff, weir ");
    CHECK_HAS(msg, self->fingerprint);
    CHECK_HAS(msg, "target differs: plugin linux-mips, weir ");
    CHECK_HAS(msg, "toolchain differs: plugin othercc/tsan, weir ");
    weir_abi_id fp_only = *self;
    fp_only.fingerprint = NULL;
    CHECK_EQ(weir_abi_check(self, &fp_only, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, "plugin (none)");
    CHECK(strstr(msg, "toolchain") == NULL);
}

/* ---- loading in process ----------------------------------------------------------------- */

static intptr_t run_job(void *arg)
{
    return weir_job_run(arg, &(weir_run_opts){.parallelism = 2});
}

TEST(load_twice_same_graph_and_run)
{
    char msg[1024];
    weir_plugin *a = NULL, *b = NULL;
    CHECK_EQ(weir_plugin_open(PLUGIN("job_count"), &a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir_plugin_open(PLUGIN("job_count"), &b, msg, sizeof(msg)), 0);
    /* One mapping: the same registration. */
    CHECK(weir_plugin_entry(a) == weir_plugin_entry(b));
    CHECK_STR(weir_plugin_entry(a)->name, "count");
    CHECK_STR(weir_plugin_entry(a)->version, "1.0");
    CHECK_STR(weir_plugin_abi(a)->fingerprint, weir_abi_self()->fingerprint);
    CHECK_STR(weir_plugin_abi(a)->toolchain, weir_abi_self()->toolchain);

    char *args[] = {(char *)PLUGIN("job_count"), (char *)"500", NULL};
    weir_job *ja = NULL, *jb = NULL;
    CHECK_EQ(weir_plugin_define(a, 2, args, &ja, msg, sizeof(msg)), 0);
    CHECK_EQ(weir_plugin_define(b, 2, args, &jb, msg, sizeof(msg)), 0);
    /* Two registrations, identical graphs: names, kinds, order. */
    CHECK_EQ(weir_job_ops(ja), 3);
    CHECK_EQ(weir_job_ops(ja), weir_job_ops(jb));
    for (int i = 0; i < weir_job_ops(ja); i++) {
        CHECK_STR(weir_job_op_name(ja, i), weir_job_op_name(jb, i));
        CHECK_EQ(weir_job_op_kind(ja, i), weir_job_op_kind(jb, i));
    }
    CHECK_STR(weir_job_op_name(ja, 0), "numbers");
    CHECK_EQ(weir_job_op_kind(ja, 0), WEIR_OP_SOURCE);
    CHECK_STR(weir_job_op_name(ja, 2), "total");
    CHECK_EQ(weir_job_op_kind(ja, 2), WEIR_OP_SINK);
    weir_job_free(jb);
    weir_plugin_close(b);

    /* The plugin's weir_* calls reach this process's libweir: it runs here. */
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    CHECK(rt != NULL);
    weir_task *t = weir_task_spawn(run_job, ja, &(weir_spawn_opts){.rt = rt});
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 0);
    weir_rt_free(rt);
    weir_op_stats st;
    CHECK_EQ(weir_job_op_stats(ja, "numbers", &st), 0);
    CHECK_EQ(st.records_out, 500);
    CHECK_EQ(weir_job_op_stats(ja, "total", &st), 0);
    CHECK_EQ(st.records_in, 500);
    weir_job_free(ja);
    weir_plugin_close(a); /* after the job: it stays valid either way */
}

TEST(define_errors)
{
    char msg[1024];
    weir_plugin *p = NULL;
    CHECK_EQ(weir_plugin_open(PLUGIN("job_count"), &p, msg, sizeof(msg)), 0);
    weir_job *j = NULL;
    char *bad[] = {(char *)"x", (char *)"badgraph", NULL};
    CHECK_LT(weir_plugin_define(p, 2, bad, &j, msg, sizeof(msg)), 0);
    CHECK(j == NULL);
    CHECK_HAS(msg, "job count: ");
    char *fail[] = {(char *)"x", (char *)"definefail", NULL};
    CHECK_EQ(weir_plugin_define(p, 2, fail, &j, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "the define function failed");
    weir_plugin_close(p);
}

TEST(refusals)
{
    char msg[1024];
    weir_plugin *p = NULL;
    CHECK_EQ(weir_plugin_open(PLUGIN("no_such_job"), &p, msg, sizeof(msg)), -ENOENT);
    CHECK(p == NULL);
    CHECK_HAS(msg, "no_such_job.so: No such file");

    CHECK_EQ(weir_plugin_open(PLUGIN("job_not_plugin"), &p, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "job_not_plugin.so: refused: not a weir job plugin of this weir: no weir "
                   "identity note");
    CHECK_HAS(msg, "rebuilt against this one");

    char path[] = "/tmp/weir-test-notelf-XXXXXX";
    int fd = mkstemp(path);
    CHECK_GE(fd, 0);
    CHECK_EQ(write(fd, "hello\n", 6), 6);
    close(fd);
    CHECK_EQ(weir_plugin_open(path, &p, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "refused: not an ELF file");
    unlink(path);

    CHECK_EQ(weir_plugin_open(WEIR_TEST_PLUGIN_DIR, &p, msg, sizeof(msg)), -EISDIR);

    CHECK_EQ(weir_plugin_open(PLUGIN("job_bad_fingerprint"), &p, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, "refused: ABI fingerprint differs: plugin 0000000000000000");
    CHECK_HAS(msg, weir_abi_self()->fingerprint);
    CHECK(strstr(msg, "toolchain") == NULL);

    CHECK_EQ(weir_plugin_open(PLUGIN("job_bad_toolchain"), &p, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, "toolchain differs: plugin othercc/none, weir ");
    CHECK_HAS(msg, weir_abi_self()->toolchain);

    CHECK_EQ(weir_plugin_open(PLUGIN("job_bad_target"), &p, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, "target differs: plugin linux-mips, weir linux-");
    CHECK(p == NULL);
}

/* The gate reads the identity from the file: a refused plugin's
 * constructor never runs (the good copy's does, so the marker works). */
TEST(refused_before_any_code_runs)
{
    char dir[] = "/tmp/weir-test-ctor-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char marker[128];
    snprintf(marker, sizeof(marker), "%s/ran", dir);
    setenv("WEIR_TEST_CTOR_MARKER", marker, 1);
    char msg[1024];
    weir_plugin *p = NULL;
    CHECK_EQ(weir_plugin_open(PLUGIN("job_ctor_bad_fingerprint"), &p, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, "refused: ABI fingerprint differs: plugin 1111111111111111");
    CHECK(p == NULL);
    CHECK_EQ(access(marker, F_OK), -1); /* its constructor did not run */
    CHECK_EQ(weir_plugin_open(PLUGIN("job_ctor"), &p, msg, sizeof(msg)), 0);
    CHECK_STR(weir_plugin_entry(p)->name, "ctor");
    CHECK_EQ(access(marker, F_OK), 0); /* this one's did */
    weir_plugin_close(p);
    unsetenv("WEIR_TEST_CTOR_MARKER");
    unlink(marker);
    rmdir(dir);
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK_EQ(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    CHECK_GT(n, 0);
    rewind(f);
    unsigned char *b = malloc((size_t)n);
    CHECK(b != NULL);
    CHECK_EQ(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Write len bytes of b to a temporary file and open it as a plugin: the
 * error, with the message in msg. */
static int open_bytes(const unsigned char *b, size_t len, char *msg, size_t msglen)
{
    char path[] = "/tmp/weir-test-elf-XXXXXX";
    int fd = mkstemp(path);
    CHECK_GE(fd, 0);
    CHECK_EQ(write(fd, b, len), (ssize_t)len);
    close(fd);
    weir_plugin *p = NULL;
    int e = weir_plugin_open(path, &p, msg, msglen);
    unlink(path);
    if (e == 0)
        weir_plugin_close(p);
    return e;
}

/* Damaged copies of a good plugin, each refused from the file with a
 * message naming what is wrong (and before dlopen: it would fail or crash
 * on most of them, with another message). */
TEST(damaged_elf_refused)
{
    size_t len;
    unsigned char *good = read_all(PLUGIN("job_count"), &len);
    unsigned char *b = malloc(len);
    CHECK(b != NULL);
    char msg[1024];
    CHECK_EQ(open_bytes(good, len, msg, sizeof(msg)), 0); /* the copy itself is fine */

    CHECK_EQ(open_bytes(good, 10, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "not an ELF file");
    CHECK_EQ(open_bytes(good, 40, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "truncated ELF file (40 bytes");
    CHECK_EQ(open_bytes(good, 200, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "truncated or damaged ELF file");

    Elf64_Ehdr eh;
    memcpy(&eh, good, sizeof(eh));
#define MUTATE(stmt)                                                                               \
    do {                                                                                           \
        memcpy(b, good, len);                                                                      \
        Elf64_Ehdr h = eh;                                                                         \
        stmt;                                                                                      \
        memcpy(b, &h, sizeof(h));                                                                  \
    } while (0)
    MUTATE(h.e_ident[EI_CLASS] = ELFCLASS32);
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "a 32-bit ELF file, weir is 64-bit");
    MUTATE(h.e_type = ET_EXEC);
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "not a shared object (ELF type 2, an executable)");
    MUTATE(h.e_machine = h.e_machine == EM_S390 ? EM_PPC64 : EM_S390);
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "built for ");
    CHECK_HAS(msg, "weir runs on ");
    MUTATE(h.e_phoff = len - 8);
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "program headers past its end");
    MUTATE(h.e_phentsize = 12);
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "damaged ELF file (program header size 12");
#undef MUTATE

    /* The note itself: find it by its header, then damage it. */
    static const unsigned char name[8] = "weir";
    unsigned char *note = NULL;
    for (size_t i = 12; i + 8 <= len && !note; i += 4)
        if (memcmp(good + i, name, 8) == 0) {
            uint32_t h[3];
            memcpy(h, good + i - 12, sizeof(h));
            if (h[0] == 5 && h[2] == WEIR__PLUGIN_NOTE_TYPE)
                note = good + i - 12;
        }
    CHECK(note != NULL);
    size_t at = (size_t)(note - good);
    uint32_t descsz;
    memcpy(&descsz, note + 4, 4);
    memcpy(b, good, len);
    uint32_t huge = 0xfffffff0u;
    memcpy(b + at + 4, &huge, 4); /* desc past the segment */
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "damaged ELF notes");
    memcpy(b, good, len);
    memset(b + at + 24, 'x', descsz - 4); /* the strings lose their NULs */
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "damaged ELF notes");
    memcpy(b, good, len);
    b[at + 12] = 'W'; /* no longer weir's note: as if built before there was one */
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "no weir identity note");
    memcpy(b, good, len);
    int32_t v = weir_abi_self()->version + 1;
    memcpy(b + at + 20, &v, 4); /* another ABI version, read from the file */
    CHECK_EQ(open_bytes(b, len, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, "refused: ABI version differs");
    free(b);
    free(good);
}

/* ---- the weir command ----------------------------------------------------------------- */

typedef struct cli_result {
    int code;
    char out[16384], err[16384];
} cli_result;

static void slurp(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
}

/* Spawn the weir command with argv (argv[0] is WEIR_TEST_CLI, NULL
 * ends it), its stdout into the file out and its stderr into the file err,
 * each created or truncated; out NULL: /dev/null, err NULL: the test's. */
static pid_t spawn_weir(char *const argv[], const char *out, const char *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    if (err)
        posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    CHECK_EQ(posix_spawn(&pid, WEIR_TEST_CLI, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* Wait for pid to end; its wait status, and the file err (what it wrote
 * to its stderr) read into msg[cap] and removed. */
static int wait_weir(pid_t pid, const char *err, char *msg, size_t cap)
{
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    slurp(err, msg, cap);
    return st;
}

/* When set: cli() sends cli_signal to weir once the job says it started
 * ("lingering" on stderr, from job_count's linger source). */
static int cli_signal;

/* Run the weir command with the given arguments (NULL-terminated). */
static cli_result *cli(const char *arg0, ...)
{
    static cli_result res;
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)WEIR_TEST_CLI;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;

    char out[] = "/tmp/weir-test-out-XXXXXX", err[] = "/tmp/weir-test-err-XXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    CHECK_GE(fo, 0);
    CHECK_GE(fe, 0);
    close(fo);
    close(fe);
    pid_t pid = spawn_weir(argv, out, err);
    if (cli_signal) {
        for (int i = 0; i < 1000; i++) { /* up to 10 s (sanitizer builds start slowly) */
            char buf[4096] = "";
            FILE *f = fopen(err, "r");
            CHECK(f != NULL);
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            buf[n] = '\0';
            fclose(f);
            if (strstr(buf, "lingering"))
                break;
            usleep(10000);
        }
        CHECK_EQ(kill(pid, cli_signal), 0);
    }
    int status = wait_weir(pid, err, res.err, sizeof(res.err));
    slurp(out, res.out, sizeof(res.out));
    if (!WIFEXITED(status))
        TEST__FAIL("weir %s died (status %d): %s", arg0, status, res.err);
    res.code = WEXITSTATUS(status);
    return &res;
}

/* The sums printed by the sink's subtasks ("count <n> sum <s>" lines). */
static void sink_totals(const char *out, long long *count, long long *sum)
{
    *count = *sum = 0;
    for (const char *p = out; (p = strstr(p, "count ")); p++) {
        long long c, s;
        if (sscanf(p, "count %lld sum %lld", &c, &s) == 2) {
            *count += c;
            *sum += s;
        }
    }
}

TEST(cli_run)
{
    cli_result *r = cli("run", PLUGIN("job_count"), "1000", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "count 1000 sum 999000\n");
    CHECK_HAS(r->err, "weir run: job count 1.0 finished in ");
    CHECK_HAS(r->err, "1000 records from 1 source, 1000 into 1 sink");

    r = cli("run", PLUGIN("job_count"), "--parallelism", "2", "--no-progress", "2000", NULL);
    CHECK_EQ(r->code, 0);
    long long count, sum;
    sink_totals(r->out, &count, &sum);
    CHECK_EQ(count, 2000);
    CHECK_EQ(sum, 2000LL * 1999);

    /* The live line, forced on (stderr is a file here). */
    r = cli("run", PLUGIN("job_count"), "--progress", "100", "linger", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "\r\033[K[");
    CHECK_HAS(r->err, "s] sources ");
    CHECK_HAS(r->err, "watermark ");
    CHECK_HAS(r->err, "\r\033[Kweir run: job count 1.0 finished in ");

    char dir[] = "/tmp/weir-test-ckpt-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    r = cli("run", PLUGIN("job_count"), "--checkpoint-dir", dir, "--checkpoint-interval-ms=5",
            "--quiet", "--", "3000", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "count 3000 sum 8997000\n");
    CHECK(strstr(r->err, "finished") == NULL); /* --quiet */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST(cli_job_failures)
{
    cli_result *r = cli("run", PLUGIN("job_count"), "fail", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir run: job count failed: ");
    CHECK_HAS(r->err, "boom at record 10");

    r = cli("run", PLUGIN("job_count"), "definefail", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "the define function failed");

    r = cli("run", PLUGIN("job_count"), "badgraph", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir run: job count: ");
}

TEST(cli_interrupted)
{
    /* The source stays open 1.5 s: the signal cancels the job, which stops
     * and reports with 128 + the signal's number. */
    cli_signal = SIGINT;
    cli_result *r = cli("run", PLUGIN("job_count"), "100", "linger", NULL);
    CHECK_EQ(r->code, 128 + SIGINT);
    CHECK_HAS(r->err, "weir run: job count interrupted by SIGINT after ");
    cli_signal = SIGTERM;
    r = cli("run", PLUGIN("job_count"), "100", "linger", NULL);
    CHECK_EQ(r->code, 128 + SIGTERM);
    CHECK_HAS(r->err, "interrupted by SIGTERM");
    cli_signal = 0;
}

TEST(cli_bad_plugins)
{
    cli_result *r = cli("run", PLUGIN("no_such_job"), NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "no_such_job.so: No such file or directory");

    r = cli("run", PLUGIN("job_not_plugin"), NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "not a weir job plugin");

    r = cli("run", "/etc/hostname", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "refused: not an ELF file");

    r = cli("lint", PLUGIN("job_not_plugin"), NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "no weir identity note");

    r = cli("run", PLUGIN("job_bad_fingerprint"), NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "refused: ABI fingerprint differs: plugin 0000");

    r = cli("lint", PLUGIN("job_bad_toolchain"), NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "toolchain differs: plugin othercc/none");
}

TEST(cli_usage)
{
    cli_result *r = cli(NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "usage: weir <command>");

    r = cli("frobnicate", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "unknown command \"frobnicate\"");

    r = cli("run", PLUGIN("job_count"), "--bogus", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "unknown flag --bogus");

    r = cli("run", PLUGIN("job_count"), "--parallelism", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--parallelism needs a value");

    r = cli("run", PLUGIN("job_count"), "--parallelism", "two", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--parallelism: \"two\" is not a number");

    r = cli("run", PLUGIN("job_count"), "--parallelism=0", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--parallelism: 0 is out of range (1..128)");

    r = cli("run", "--restore=1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--restore takes no value");

    r = cli("run", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "no job plugin given");

    /* run refuses what lint calls an error. */
    r = cli("run", PLUGIN("job_count"), "--checkpoint-interval-ms", "100", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "without --checkpoint-dir");
}

TEST(cli_help)
{
    cli_result *r = cli("--help", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "usage: weir <command>");
    r = cli("run", "--help", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "usage: weir run JOB.so");
    CHECK_HAS(r->out, "--checkpoint-interval-ms");
    r = cli("lint", "-h", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "usage: weir lint JOB.so");
    r = cli("version", "--help", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "usage: weir version");
    r = cli("version", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, weir_abi_self()->fingerprint);
}

/* ---- weir submit / jobs / cancel ------------------------------------------------------ */

/* A port nobody listens on: bound, then closed. */
static int closed_port(void)
{
    int fd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(fd, 0);
    int port = weir_net_local_port(fd);
    close(fd);
    return port;
}

TEST(cli_cluster_usage)
{
    unsetenv("WEIR_COORDINATOR");
    cli_result *r = cli("submit", "--help", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "usage: weir submit JOB.so (--coordinator HOST:PORT | --ha-dir DIR)");
    CHECK_HAS(r->out, "--detach");
    r = cli("jobs", "-h", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "usage: weir jobs (--coordinator HOST:PORT | --ha-dir DIR)");
    r = cli("cancel", "--help", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "usage: weir cancel JOB_ID");
    r = cli("--help", NULL);
    CHECK_HAS(r->out, "submit JOB.so");

    /* No coordinator: 2, before any plugin is read or connection made. */
    r = cli("submit", PLUGIN("job_count"), NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "weir submit: no coordinator: give --coordinator HOST:PORT or set "
                      "WEIR_COORDINATOR");
    r = cli("jobs", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "weir jobs: no coordinator");
    r = cli("cancel", "3", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "weir cancel: no coordinator");

    /* Bad numbers, flags and addresses: 2. */
    r = cli("submit", PLUGIN("job_count"), "--coordinator", "127.0.0.1:1", "--parallelism", "x",
            NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--parallelism: \"x\" is not a number");
    r = cli("submit", PLUGIN("job_count"), "--coordinator=127.0.0.1:1", "--max-restarts=-2", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--max-restarts: -2 is out of range");
    r = cli("submit", PLUGIN("job_count"), "--coordinator=127.0.0.1:1", "--checkpoint-interval-ms",
            "10", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "without --checkpoint-dir");
    r = cli("submit", PLUGIN("job_count"), "--coordinator=127.0.0.1:1", "--restore", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--restore without --checkpoint-dir");
    r = cli("submit", PLUGIN("job_count"), "--coordinator=127.0.0.1:1", "--state-backend",
            "rocks:/x", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--state-backend rocks:/x: no backend of that scheme");
    r = cli("submit", PLUGIN("job_count"), "--coordinator=127.0.0.1:1",
            "--state-backend=remote:", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--state-backend remote:: not a state backend URI");
    r = cli("submit", PLUGIN("job_count"), "--coordinator=127.0.0.1:1", "--idle-timeout-ms=soon",
            NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--idle-timeout-ms: \"soon\" is not a number");
    r = cli("submit", PLUGIN("job_count"), "--coordinator", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--coordinator needs a value");
    r = cli("submit", "--coordinator=127.0.0.1:1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "no job plugin given");
    r = cli("submit", PLUGIN("job_count"), "--coordinator", "127.0.0.1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "is not HOST:PORT");
    r = cli("jobs", "--coordinator", "::1:7000", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "[ADDRESS]:PORT");
    r = cli("jobs", "--coordinator", "127.0.0.1:1", "--bogus", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "weir jobs: unknown flag --bogus");
    r = cli("jobs", "--coordinator", "127.0.0.1:1", "extra", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "unexpected argument extra");
    r = cli("cancel", "--coordinator", "127.0.0.1:1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "no job id given");
    r = cli("cancel", "seven", "--coordinator", "127.0.0.1:1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "JOB_ID: \"seven\" is not a number");
    r = cli("cancel", "0", "--coordinator", "127.0.0.1:1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "JOB_ID: 0 is out of range");

    /* A plugin that cannot be read, or is not a weir job: 2. */
    r = cli("submit", PLUGIN("no_such_job"), "--coordinator", "127.0.0.1:1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "no_such_job.so");
    r = cli("submit", PLUGIN("job_not_plugin"), "--coordinator", "127.0.0.1:1", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "not a weir job plugin");
}

TEST(cli_cluster_connection_refused)
{
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", closed_port());
    cli_result *r = cli("submit", PLUGIN("job_count"), "--coordinator", addr, "100", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir submit: coordinator ");
    CHECK_HAS(r->err, addr);
    CHECK_HAS(r->err, "cannot connect: Connection refused");
    r = cli("jobs", "--coordinator", addr, NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir jobs: coordinator ");
    CHECK_HAS(r->err, "Connection refused");
    r = cli("cancel", "4", "--coordinator", addr, NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "Connection refused");
    /* WEIR_COORDINATOR stands for --coordinator. */
    CHECK_EQ(setenv("WEIR_COORDINATOR", addr, 1), 0);
    r = cli("jobs", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "Connection refused");
    CHECK_EQ(unsetenv("WEIR_COORDINATOR"), 0);
}

/*
 * A stand-in coordinator on a thread of its own, for the commands end to
 * end: it answers a hello, asks for a plugin it has not seen, accepts (job
 * 41 + n) or refuses (job argument "refuse"), and ends the job at once
 * (failed for the argument "fail"); lists two jobs; cancels job 42,
 * reports job 1 ended and any other unknown. It serves `conns`
 * connections, then stops.
 */
typedef struct coord {
    int lfd, conns;
    char addr[64];
    uint8_t cached[32];
    int have_cached;
    uint64_t next_job;
    pthread_t thread;
} coord;

static void coord_send(int fd, const weir__cl_msg *m)
{
    weir_frame_builder fb;
    CHECK_EQ(weir__cl_encode(m, &fb, NULL, 0), 0);
    const uint8_t *p;
    size_t len;
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    weir_frame_write(fd, p, len, weir_time_after_ms(20000)); /* a detached client may be gone */
    weir_frame_builder_close(&fb);
}

static int coord_recv(int fd, weir_frame_parser *p, weir_frame *fr, weir__cl_msg *m)
{
    if (weir_frame_read(fd, p, fr, weir_time_after_ms(20000)) <= 0)
        return 0;
    CHECK_EQ(weir__cl_decode(fr->data, fr->len, m, NULL, 0), 0);
    return 1;
}

static void coord_submit(coord *co, int fd, weir_frame_parser *p, weir__cl_submit_job *s)
{
    const char *arg = s->args.n ? s->args.v[s->args.n - 1] : "";
    if (!co->have_cached || memcmp(co->cached, s->plugins.v[0].sha256, 32) != 0) {
        weir__cl_hash h;
        memcpy(h.b, s->plugins.v[0].sha256, 32);
        weir__cl_msg a = {.kind = WEIR_CLUSTER_SUBMIT_JOB_ACK,
                          .u.submit_ack = {.status = WEIR__CL_SUBMIT_NEED_PLUGINS,
                                           .message = "",
                                           .missing = {&h, 1}}};
        coord_send(fd, &a);
        weir_frame fr;
        weir__cl_msg up;
        CHECK(coord_recv(fd, p, &fr, &up));
        CHECK_EQ(up.kind, WEIR_CLUSTER_PLUGIN_UPLOAD);
        uint8_t got[32];
        CHECK_EQ(weir__sha256(up.u.upload.bytes.p, up.u.upload.bytes.n, got), 0);
        CHECK(memcmp(got, h.b, 32) == 0);
        memcpy(co->cached, got, 32);
        co->have_cached = 1;
        weir__cl_msg_free(&up);
        weir_frame_free(&fr);
    }
    if (strcmp(arg, "refuse") == 0) {
        weir__cl_msg a = {.kind = WEIR_CLUSTER_SUBMIT_JOB_ACK,
                          .u.submit_ack = {.status = WEIR__CL_SUBMIT_REFUSED,
                                           .message = "no worker has a free slot"}};
        coord_send(fd, &a);
        return;
    }
    uint64_t id = ++co->next_job;
    weir__cl_msg a = {
        .kind = WEIR_CLUSTER_SUBMIT_JOB_ACK,
        .u.submit_ack = {.status = WEIR__CL_SUBMIT_ACCEPTED, .job = id, .message = ""}};
    coord_send(fd, &a);
    weir__cl_msg d = {.kind = WEIR_CLUSTER_JOB_COMPLETED,
                      .u.completed = {.job = id,
                                      .message = "",
                                      .elapsed_ms = 1500,
                                      .records_in = 1000,
                                      .records_out = 1000,
                                      .sources = 1,
                                      .sinks = 1,
                                      .watermark = WEIR_WATERMARK_MAX,
                                      .ckpt_completed = s->checkpoint_dir[0] ? 3 : 0,
                                      .ckpt_latest = s->checkpoint_dir[0] ? 3 : 0,
                                      .restarts = (uint32_t)(s->max_restarts > 0)}};
    if (strcmp(arg, "fail") == 0) {
        d.u.completed.err = -EIO;
        d.u.completed.message = "operator double: boom at record 10";
    }
    coord_send(fd, &d);
}

static void coord_serve(coord *co, int fd)
{
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    weir_frame fr;
    weir__cl_msg m;
    while (coord_recv(fd, &p, &fr, &m)) {
        switch (m.kind) {
        case WEIR_CLUSTER_HELLO_CLIENT: {
            weir__cl_msg a = {
                .kind = WEIR_CLUSTER_HELLO_CLIENT_ACK,
                .u.hello_ack = {WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, 0, ""}};
            coord_send(fd, &a);
            break;
        }
        case WEIR_CLUSTER_SUBMIT_JOB:
            coord_submit(co, fd, &p, &m.u.submit);
            break;
        case WEIR_CLUSTER_LIST_JOBS: {
            weir__cl_job_info jobs[2] = {
                {1, "count", WEIR__CL_JOB_FAILED, 2, 1700000000000, 1700000005000,
                 "boom\nat record 10"},
                {42, "wordcount", WEIR__CL_JOB_RUNNING, 4, 1700000010000, 0, ""},
            };
            weir__cl_msg l = {.kind = WEIR_CLUSTER_JOB_LIST, .u.job_list.jobs = {jobs, 2}};
            coord_send(fd, &l);
            break;
        }
        case WEIR_CLUSTER_CANCEL_JOB: {
            uint64_t id = m.u.cancel_job.job;
            weir__cl_msg a = {.kind = WEIR_CLUSTER_CANCEL_JOB_ACK,
                              .u.cancel_job_ack = {id,
                                                   id == 42  ? WEIR__CL_CANCEL_OK
                                                   : id == 1 ? WEIR__CL_CANCEL_ENDED
                                                             : WEIR__CL_CANCEL_UNKNOWN,
                                                   ""}};
            coord_send(fd, &a);
            break;
        }
        default:
            TEST__FAIL("the fake coordinator got a %s", weir__cl_kind_name(m.kind));
        }
        weir__cl_msg_free(&m);
        weir_frame_free(&fr);
    }
    weir_frame_parser_close(&p);
}

static intptr_t coord_fiber(void *arg)
{
    coord *co = arg;
    for (int i = 0; i < co->conns; i++) {
        int fd = weir_net_accept(co->lfd, NULL, weir_time_after_ms(60000));
        CHECK_GE(fd, 0);
        coord_serve(co, fd);
        weir_io_close(fd);
    }
    return 0;
}

static void *coord_thread(void *arg)
{
    CHECK_EQ(test_run_main(coord_fiber, arg), 0);
    return NULL;
}

static void coord_start(coord *co, int conns)
{
    memset(co, 0, sizeof(*co));
    co->lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(co->lfd, 0);
    snprintf(co->addr, sizeof(co->addr), "127.0.0.1:%d", weir_net_local_port(co->lfd));
    co->conns = conns;
    co->next_job = 41;
    CHECK_EQ(pthread_create(&co->thread, NULL, coord_thread, co), 0);
}

static void coord_stop(coord *co)
{
    CHECK_EQ(pthread_join(co->thread, NULL), 0);
    close(co->lfd);
}

TEST(cli_cluster_against_a_stand_in_coordinator)
{
    coord co;
    coord_start(&co, 9);
    /* Submit and wait: the plugin is uploaded once, the summary is run's. */
    cli_result *r = cli("submit", PLUGIN("job_count"), "--coordinator", co.addr, "1000", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "weir submit: job 42 submitted\n");
    CHECK_HAS(r->err, "weir submit: job 42 finished in 1.50s: 1000 records from 1 source, 1000 "
                      "into 1 sink, watermark end\n");
    CHECK_STR(r->out, "");
    /* Detached, with checkpoints and restarts (the plugin now cached). */
    r = cli("submit", "--detach", PLUGIN("job_count"), "--coordinator", co.addr, NULL);
    CHECK_EQ(r->code, 0);
    CHECK_STR(r->out, "43\n");
    char dir[] = "/tmp/weir-test-submit-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    r = cli("submit", PLUGIN("job_count"), "--coordinator=" /* placeholder */, NULL);
    CHECK_EQ(r->code, 2); /* an empty address */
    char flag[96];
    snprintf(flag, sizeof(flag), "--coordinator=%s", co.addr);
    r = cli("submit", PLUGIN("job_count"), flag, "--checkpoint-dir", dir,
            "--checkpoint-interval-ms", "100", "--max-restarts", "3", "--", "7", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "weir submit: job 44 finished in 1.50s: ");
    CHECK_HAS(r->err, ", checkpoints 3 (latest 3, restored 0), restarts 1\n");
    rmdir(dir);
    /* A failed job, a refused one. */
    r = cli("submit", PLUGIN("job_count"), flag, "fail", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir submit: job 45 failed: operator double: boom at record 10\n");
    r = cli("submit", PLUGIN("job_count"), flag, "refuse", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "refused the job: no worker has a free slot");
    /* The table. */
    r = cli("jobs", flag, NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "ID  NAME       STATE       PARALLELISM  SUBMITTED             ENDED     "
                      "            MESSAGE\n");
    CHECK_HAS(r->out, " 1  count      failed                2  2023-11-14T22:13:20Z  "
                      "2023-11-14T22:13:25Z  boom?at record 10\n");
    CHECK_HAS(r->out, "42  wordcount  running               4  2023-11-14T22:13:30Z  -\n");
    /* Cancels. */
    r = cli("cancel", "42", flag, NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "weir cancel: job 42 is being cancelled");
    r = cli("cancel", "1", flag, NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "job 1 had already ended");
    r = cli("cancel", "77", flag, NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir cancel: no job 77 on coordinator ");
    coord_stop(&co);
}

TEST(cli_lint)
{
    cli_result *r = cli("lint", PLUGIN("job_count"), "--parallelism", "2", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "ok: job count 1.0, 3 operators (1 sources, 1 sinks)");

    r = cli("lint", PLUGIN("job_count"), "badgraph", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir lint: error: job count: ");
    CHECK_HAS(r->err, "weir lint: 1 error");

    r = cli("lint", PLUGIN("job_count"), "nondet", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "job count is not deterministic: operator 1 is \"times2-1\", then "
                      "\"times2-2\" when defined again");

    r = cli("lint", PLUGIN("job_count"), "nosink", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "warning: job count has no sink");
    CHECK_HAS(r->out, "with warnings");

    r = cli("lint", PLUGIN("job_count"), "--restore", "--checkpoint-interval-ms", "50", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "--restore without --checkpoint-dir");
    CHECK_HAS(r->err, "weir lint: 2 errors");

    r = cli("lint", PLUGIN("job_count"), "--checkpoint-dir", "/proc/weir/ckpt",
            "--checkpoint-interval-ms", "50", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "checkpoint directory /proc/weir/ckpt cannot be created");

    char dir[] = "/tmp/weir-test-lint-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    r = cli("lint", PLUGIN("job_count"), "--checkpoint-dir", dir, "--restore",
            "--checkpoint-interval-ms", "1", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "no completed checkpoint");
    CHECK_HAS(r->err, "is very short");
    rmdir(dir);

    r = cli("lint", PLUGIN("job_count"), "--checkpoint-dir", "/etc/hostname",
            "--checkpoint-interval-ms", "100", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "is not a directory");
}

/* weir lint --role=...: a `weir node` command line checked as the node
 * checks it at start (docs/cluster.md, "Settings and lint"). */
TEST(cli_lint_node_settings)
{
    /* The defaults are clean. */
    cli_result *r = cli("lint", "--role=coordinator", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "ok: coordinator settings (heartbeat timeout 2000 ms, watchdog 100 ms, "
                      "stall timeout 10000 ms, restart drain 120000 ms)");
    CHECK(strstr(r->err, "warning") == NULL);

    /* A zero bound of each class is an error; the three add up. */
    r = cli("lint", "--role=coordinator", "--port", "0", "--max-outbound-control-frames", "0",
            "--max-outbound-control-bytes=0", "--max-outbound-bulk-bytes", "0", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "weir lint: error: --max-outbound-control-frames 0 refuses every control "
                      "frame to a worker");
    CHECK_HAS(r->err, "error: --max-outbound-control-bytes 0 refuses");
    CHECK_HAS(r->err, "error: --max-outbound-bulk-bytes 0 refuses every deploy");
    CHECK_HAS(r->err, "weir lint: 3 errors");
    CHECK(strstr(r->out, "ok:") == NULL);

    /* Suspicious timeouts warn and pass, each named. */
    r = cli("lint", "--role=coordinator", "--heartbeat-timeout-ms", "800", "--watchdog-interval-ms",
            "900", "--outbound-stall-timeout-ms", "700", "--max-outbound-bulk-bytes", "1048576",
            NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "with warnings");
    CHECK_HAS(r->err, "warning: --max-outbound-bulk-bytes 1048576 is below one largest frame");
    CHECK_HAS(r->err, "warning: --watchdog-interval-ms 900 is longer than --heartbeat-timeout-ms "
                      "800");
    CHECK_HAS(r->err, "warning: --heartbeat-timeout-ms 800 is under two heartbeats");
    CHECK_HAS(r->err, "warning: --outbound-stall-timeout-ms 700 is at or below "
                      "--heartbeat-timeout-ms 800");
    CHECK_HAS(r->err, "warning: --watchdog-interval-ms 900 is longer than "
                      "--outbound-stall-timeout-ms 700");
    r = cli("lint", "--role=coordinator", "--outbound-stall-timeout-ms", "120000", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->err, "warning: --outbound-stall-timeout-ms 120000 is at or above "
                      "--restart-drain-timeout-ms 120000");
    r = cli("lint", "--role=coordinator", "--outbound-stall-timeout-ms", "90000",
            "--restart-drain-timeout-ms", "90001", NULL);
    CHECK_EQ(r->code, 0);
    CHECK(strstr(r->err, "warning") == NULL);

    /* With the stall verdict off only the bounds are checked: a stall
     * timeout cannot then be too short or too long. */
    r = cli("lint", "--role=coordinator", "--outbound-stall-timeout-ms", "0",
            "--watchdog-interval-ms", "1000", "--heartbeat-timeout-ms", "1500", NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "stall timeout 0 ms");
    CHECK(strstr(r->err, "stall") == NULL);
    r = cli("lint", "--role=coordinator", "--outbound-stall-timeout-ms", "-1",
            "--max-outbound-bulk-bytes", "0", NULL);
    CHECK_EQ(r->code, 1);
    CHECK_HAS(r->err, "--max-outbound-bulk-bytes 0 refuses");

    /* Bad usage is 2: a malformed or out-of-range value, an unknown flag,
     * a coordinator's setting given to a worker, no role. */
    r = cli("lint", "--role=coordinator", "--heartbeat-timeout-ms", "soon", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "weir lint: --heartbeat-timeout-ms: \"soon\" is not a number");
    r = cli("lint", "--role=coordinator", "--watchdog-interval-ms", "0", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--watchdog-interval-ms: 0 is out of range");
    r = cli("lint", "--role=coordinator", "--max-outbound-control-frames", "-5", NULL);
    CHECK_EQ(r->code, 2);
    r = cli("lint", "--role=coordinator", "--heartbeat-timout-ms", "5", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "unknown flag --heartbeat-timout-ms");
    r = cli("lint", "--role=worker", "--id", "w", "--coordinator", "127.0.0.1:1",
            "--heartbeat-timeout-ms", "5000", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "are for the coordinator");
    r = cli("lint", "--role=leader", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "--role must be coordinator or worker");

    /* A worker's command line: parsed as weir node parses it. */
    r = cli("lint", "--role=worker", "--id", "w", "--coordinator", "127.0.0.1:1", "--slots", "4",
            NULL);
    CHECK_EQ(r->code, 0);
    CHECK_HAS(r->out, "ok: worker w settings");
    r = cli("lint", "--role=worker", "--id", "w", "--coordinator", "nowhere", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "is not HOST:PORT");

    /* weir node checks the same at start: an error refuses to start (bad
     * usage) before anything listens; a warning starts (not run here: the
     * node would then run until a signal). */
    r = cli("node", "--role=coordinator", "--port", "0", "--max-outbound-bulk-bytes", "0", NULL);
    CHECK_EQ(r->code, 2);
    CHECK_HAS(r->err, "weir node: error: --max-outbound-bulk-bytes 0 refuses every deploy");
    CHECK_HAS(r->err, "weir node: not started: 1 error");
    CHECK(strstr(r->out, "listening") == NULL);
}

/* ---- the crash test: weir run SIGKILLed and restored ----------------------------------------- */
static int cmp_line(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The committed lines of the sink's directory, sorted. */
static char **committed_lines(const char *dir, size_t *n)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cat %s/part-* 2>/dev/null | sort", dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t cap = 1024, cnt = 0;
    char **v = malloc(cap * sizeof(*v)), line[128];
    while (fgets(line, sizeof(line), p)) {
        line[strcspn(line, "\n")] = '\0';
        if (cnt == cap)
            v = realloc(v, (cap *= 2) * sizeof(*v));
        v[cnt++] = strdup(line);
    }
    pclose(p);
    qsort(v, cnt, sizeof(*v), cmp_line);
    *n = cnt;
    return v;
}

/* Start weir run job_eo --parallelism 2 --no-progress [--checkpoint-dir
 * ckpt --checkpoint-interval-ms interval (ckpt not NULL)] [--restore] --
 * out n, its stdout /dev/null and its stderr into the file err (NULL: the
 * test's). */
/* The state backend spawn_eo's runs name (NULL: the default). */
static const char *eo_state;

static pid_t spawn_eo(const char *ckpt, const char *interval, const char *out, const char *n,
                      int restore, const char *err)
{
    char *argv[18];
    int a = 0;
    argv[a++] = (char *)WEIR_TEST_CLI;
    argv[a++] = "run";
    argv[a++] = (char *)PLUGIN("job_eo");
    argv[a++] = "--parallelism";
    argv[a++] = "2";
    argv[a++] = "--no-progress";
    if (ckpt) {
        argv[a++] = "--checkpoint-dir";
        argv[a++] = (char *)ckpt;
        argv[a++] = "--checkpoint-interval-ms";
        argv[a++] = (char *)interval;
    }
    if (restore)
        argv[a++] = "--restore";
    if (eo_state) {
        argv[a++] = "--state-backend";
        argv[a++] = (char *)eo_state;
    }
    argv[a++] = "--";
    argv[a++] = (char *)out;
    argv[a++] = (char *)n;
    argv[a] = NULL;
    return spawn_weir(argv, NULL, err);
}

/* weir run job_eo with checkpoints, SIGKILLed after `kill_ms` (0: run to
 * the end); returns the exit status. */
static int run_eo(const char *ckpt, const char *out, const char *n, int restore, int kill_ms)
{
    pid_t pid = spawn_eo(ckpt, "15", out, n, restore, NULL);
    if (kill_ms) {
        usleep((useconds_t)kill_ms * 1000);
        kill(pid, SIGKILL);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return st;
}

/* SIGKILLs at random moments, each run restoring the last: the committed
 * output is an uninterrupted run's. Once with keyed state in memory, once
 * on the remote-read backend over a directory pool (weir run
 * --state-backend: the option travels through the embedded cluster to
 * the subtasks, which write their runs into the pool). */
static void crash_rounds(const char *state)
{
    char base[] = "/tmp/weir-eo-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char ckpt[128], out[128], ref[128], ref_ckpt[128], uri[160], runs[160];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", base);
    snprintf(out, sizeof(out), "%s/out", base);
    snprintf(ref, sizeof(ref), "%s/ref", base);
    snprintf(ref_ckpt, sizeof(ref_ckpt), "%s/ref-ckpt", base);
    snprintf(uri, sizeof(uri), "%s%s/pool", state ? state : "", base);
    snprintf(runs, sizeof(runs), "%s/pool/runs", base);
    eo_state = state ? uri : NULL;
    const char *n = "100000"; /* 500 calls of >= 1 ms per source subtask: ~0.6-1 s */
    unsigned seed = (unsigned)getpid();
    int kills = 0;
    for (int round = 0; round < 4; round++) {
        int st = run_eo(ckpt, out, n, round > 0, round < 3 ? 60 + (int)(rand_r(&seed) % 150) : 0);
        if (round < 3)
            kills += WIFSIGNALED(st);
        else
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK_GE(kills, 1);
    if (state) {
        /* Runs went to the pool: its runs/ directory is made by the first
         * one written. (It may be empty by now: runs no retained
         * checkpoint needs are deleted, and the last round's final
         * checkpoint holds no state.) */
        DIR *d = opendir(runs);
        CHECK(d != NULL);
        closedir(d);
    }
    eo_state = NULL;
    int st = run_eo(ref_ckpt, ref, n, 0, 0); /* uninterrupted, in memory */
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    size_t gn, rn;
    char **got = committed_lines(out, &gn), **want = committed_lines(ref, &rn);
    CHECK_EQ(rn, 100000);
    CHECK_EQ(gn, rn);
    for (size_t i = 0; i < gn; i++) {
        if (strcmp(got[i], want[i]))
            fprintf(stderr, "line %zu: %s, want %s\n", i, got[i], want[i]);
        CHECK_STR(got[i], want[i]);
        free(got[i]);
        free(want[i]);
    }
    free(got);
    free(want);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

TEST(cli_crash_restore_is_exactly_once)
{
    crash_rounds(NULL);
    crash_rounds("remote:file://");
}

/* ---- SIGTERM while checkpointing: a clean exit, a consistent directory ---------------------- */
/* The latest COMPLETED-<id> in dir, 0 if none. */
static unsigned long long latest_completed(const char *dir)
{
    DIR *d = opendir(dir);
    unsigned long long best = 0, id;
    char extra;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (sscanf(de->d_name, "COMPLETED-%llu%c", &id, &extra) == 1 && id > best)
            best = id;
    if (d)
        closedir(d);
    return best;
}

/* weir run job_eo with a checkpoint every millisecond gets SIGTERM at a
 * random moment after its first completed checkpoint (a seeded PRNG, the
 * seed printed): it must exit 143 with its report and nothing else (no
 * sanitizer report: every task of the run was waited for and freed), and
 * leave no checkpoint directory without its COMPLETED marker. */
TEST(cli_sigterm_while_checkpointing)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    fprintf(stderr, "cli_sigterm_while_checkpointing: seed %u\n", seed);
    char base[] = "/tmp/weir-term-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char ckpt[128], out[128], err[160];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", base);
    snprintf(out, sizeof(out), "%s/out", base);
    snprintf(err, sizeof(err), "%s/stderr", base);
    for (int round = 0; round < 8; round++) {
        unsigned long long before = latest_completed(ckpt);
        pid_t pid = spawn_eo(ckpt, "1", out, "100000000", 1, err);
        /* This run's own first checkpoint: the job runs (and the signals
         * are read by weir run, not fatal). Up to 30 s: sanitizer builds
         * start slowly. */
        for (int i = 0; i < 3000 && latest_completed(ckpt) <= before; i++)
            usleep(10000);
        CHECK_GT(latest_completed(ckpt), before);
        usleep((useconds_t)(rand_r(&seed) % 40000));
        CHECK_EQ(kill(pid, SIGTERM), 0);
        static char msg[16384];
        int st = wait_weir(pid, err, msg, sizeof(msg));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 128 + SIGTERM)
            TEST__FAIL("round %d: status %d: %s", round, st, msg);
        CHECK_HAS(msg, "weir run: job eo interrupted by SIGTERM after ");
        CHECK(strstr(msg, "Sanitizer") == NULL);
        DIR *d = opendir(ckpt);
        CHECK(d != NULL);
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            unsigned long long id;
            char extra, marker[256];
            if (sscanf(de->d_name, "chk-%llu%c", &id, &extra) != 1)
                continue;
            snprintf(marker, sizeof(marker), "%s/COMPLETED-%llu", ckpt, id);
            if (access(marker, F_OK) != 0)
                TEST__FAIL("round %d: chk-%llu has no COMPLETED marker", round, id);
        }
        closedir(d);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

/* SIGTERM at a random moment of weir run's start - before its runtime
 * runs, while its coordinator and worker start, while the job is submitted
 * or deployed (a seeded PRNG, the seed printed): the job is cancelled
 * whenever the signal comes (or, before weir has blocked the signal, the
 * process dies of it), never a hang, a crash or a sanitizer report, and the
 * output directory holds no committed part file of a job that did not
 * finish. */
TEST(cli_sigterm_while_starting)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    fprintf(stderr, "cli_sigterm_while_starting: seed %u\n", seed);
    char base[] = "/tmp/weir-start-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char out[128], err[160];
    snprintf(out, sizeof(out), "%s/out", base);
    snprintf(err, sizeof(err), "%s/stderr", base);
    int cancelled = 0;
    for (int round = 0; round < 12; round++) {
        pid_t pid = spawn_eo(NULL, NULL, out, "100000000", 0, err);
        usleep((useconds_t)(rand_r(&seed) % 60000));
        CHECK_EQ(kill(pid, SIGTERM), 0);
        static char msg[16384];
        int st = wait_weir(pid, err, msg, sizeof(msg));
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM)
            continue; /* before weir blocked it */
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 128 + SIGTERM)
            TEST__FAIL("round %d: status %d: %s", round, st, msg);
        CHECK_HAS(msg, "weir run: job eo interrupted by SIGTERM after ");
        CHECK(strstr(msg, "Sanitizer") == NULL);
        cancelled++;
        DIR *d = opendir(out);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL)
            if (strncmp(de->d_name, "part-", 5) == 0)
                TEST__FAIL("round %d: %s committed by a cancelled job", round, de->d_name);
        if (d)
            closedir(d);
    }
    fprintf(stderr, "cli_sigterm_while_starting: %d of 12 cancelled by weir run\n", cancelled);
    CHECK_GT(cancelled, 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

/* ---- two runs on one directory ---------------------------------------------------------- */
static int has_completed(const char *dir)
{
    return latest_completed(dir) > 0;
}

/* ---- weir run opens no port ---------------------------------------------------------------- */
/* The socket inodes of /proc/net/FILE (tcp, tcp6) into v[*n]. */
static void net_inodes(const char *file, unsigned long *v, size_t *n, size_t cap)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/net/%s", file);
    FILE *f = fopen(path, "r");
    if (!f)
        return; /* (no IPv6) */
    while (fgets(line, sizeof(line), f) && *n < cap) {
        unsigned long inode;
        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(line, " %*s %*s %*s %*s %*s %*s %*s %*s %*s %lu", &inode) == 1 && inode)
            v[(*n)++] = inode;
    }
    fclose(f);
}

/* weir run runs its job on a cluster in its process with no TCP socket at
 * all - no listener, no connection: while the job runs (it has completed a
 * checkpoint), none of the process's sockets is a TCP one. */
TEST(cli_run_opens_no_tcp_socket)
{
    char base[] = "/tmp/weir-noport-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char ckpt[128], out[128];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", base);
    snprintf(out, sizeof(out), "%s/out", base);
    pid_t pid = spawn_eo(ckpt, "15", out, "100000000", 0, NULL);
    int st;
    for (int i = 0; i < 6000 && !has_completed(ckpt); i++) { /* up to 30 s */
        CHECK_EQ(waitpid(pid, &st, WNOHANG), 0);
        usleep(5000);
    }
    CHECK(has_completed(ckpt));
    static unsigned long tcp[65536];
    size_t ntcp = 0;
    net_inodes("tcp", tcp, &ntcp, 65536);
    net_inodes("tcp6", tcp, &ntcp, 65536);
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%ld/fd", (long)pid);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *de;
    int sockets = 0;
    while ((de = readdir(d)) != NULL) {
        char link[400], target[128];
        snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
        ssize_t k = readlink(link, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = 0;
        unsigned long inode;
        if (sscanf(target, "socket:[%lu]", &inode) != 1)
            continue;
        sockets++;
        for (size_t i = 0; i < ntcp; i++)
            if (tcp[i] == inode) {
                kill(pid, SIGKILL);
                TEST__FAIL("descriptor %s of weir run is a TCP socket", de->d_name);
            }
    }
    closedir(d);
    CHECK_GT(sockets, 0); /* its socketpairs: the scan saw them */
    CHECK_EQ(kill(pid, SIGTERM), 0);
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

/* A run holding its directories (stopped, so it stays mid-job with output
 * pending): the same command with --restore is refused at once with exit
 * 2 naming the directory and the holder's pid, and so is a run with its
 * own checkpoint directory writing into the same output. The holder then
 * dies by SIGKILL: its lock goes with it, the restore runs, and the output
 * has every line exactly once. */
TEST(cli_second_run_on_held_dirs_exits_2_and_a_killed_holder_does_not_block)
{
    char base[] = "/tmp/weir-lock-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char ckpt[128], ckpt2[128], out[128];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", base);
    snprintf(ckpt2, sizeof(ckpt2), "%s/ckpt2", base);
    snprintf(out, sizeof(out), "%s/out", base);
    const long long total = 200000; /* 1000 calls of >= 1 ms per source subtask */
    char n[32];
    snprintf(n, sizeof(n), "%lld", total);
    pid_t holder = spawn_eo(ckpt, "15", out, n, 0, NULL);
    int st;
    for (int i = 0; i < 6000 && !has_completed(ckpt); i++) { /* up to 30 s */
        CHECK_EQ(waitpid(holder, &st, WNOHANG), 0);          /* still running */
        usleep(5000);
    }
    CHECK(has_completed(ckpt));
    CHECK_EQ(kill(holder, SIGSTOP), 0);
    CHECK_EQ(waitpid(holder, &st, WUNTRACED), holder);
    CHECK(WIFSTOPPED(st));

    char pid[32];
    snprintf(pid, sizeof(pid), "process %ld", (long)holder);
    cli_result *r =
        cli("run", PLUGIN("job_eo"), "--parallelism", "2", "--no-progress", "--checkpoint-dir",
            ckpt, "--checkpoint-interval-ms", "15", "--restore", "--", out, n, NULL);
    if (r->code != 2) {
        kill(holder, SIGKILL); /* stopped, it would hold the test's pipes */
        TEST__FAIL("exit %d, not 2: %s", r->code, r->err);
    }
    CHECK_HAS(r->err, "not started");
    CHECK_HAS(r->err, ckpt);
    CHECK_HAS(r->err, pid);
    r = cli("run", PLUGIN("job_eo"), "--parallelism", "2", "--no-progress", "--checkpoint-dir",
            ckpt2, "--checkpoint-interval-ms", "15", "--", out, n, NULL);
    if (r->code != 2) {
        kill(holder, SIGKILL);
        TEST__FAIL("exit %d, not 2: %s", r->code, r->err);
    }
    CHECK_HAS(r->err, "output directory of file sink \"out\"");
    CHECK_HAS(r->err, out);
    CHECK_HAS(r->err, pid);

    CHECK_EQ(kill(holder, SIGKILL), 0);
    CHECK_EQ(waitpid(holder, &st, 0), holder);
    CHECK(WIFSIGNALED(st));
    st = run_eo(ckpt, out, n, 1, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* Exactly once: key k's running count goes 1, 2, ... up to how many
     * of 0..total-1 are k mod 13, each line once. */
    size_t gn, wn = 0;
    char **got = committed_lines(out, &gn);
    char **want = malloc((size_t)total * sizeof(*want));
    for (long long k = 0; k < 13; k++)
        for (long long c = 1; c <= (total - k + 12) / 13; c++) {
            char line[64];
            snprintf(line, sizeof(line), "k=%lld n=%lld", k, c);
            want[wn++] = strdup(line);
        }
    CHECK_EQ(wn, (size_t)total);
    qsort(want, wn, sizeof(*want), cmp_line);
    CHECK_EQ(gn, wn);
    for (size_t i = 0; i < gn; i++) {
        CHECK_STR(got[i], want[i]);
        free(got[i]);
        free(want[i]);
    }
    free(got);
    free(want);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

TEST_MAIN()
