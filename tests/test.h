/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test.h - weir's minimal test harness.
 *
 * Why not cmocka: its failure path longjmps back to the runner, which is not
 * safe from inside a fiber running on another stack. Here a failed check
 * prints both operands with file:line and aborts the test binary, which CTest
 * reports as a failure; tests run one after another and the binary ends with
 * "N passed, 0 failed". Run a single test with `./test_x NAME`.
 *
 *   TEST(sleep_orders) { CHECK_EQ(1 + 1, 2); }
 *   TEST_MAIN()
 */
#ifndef WEIR_TESTS_TEST_H
#define WEIR_TESTS_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case;

#define TEST_MAX 256
extern test_case test__cases[TEST_MAX];
extern int test__ncases;

#define TEST(name)                                                                                 \
    static void test_##name(void);                                                                 \
    __attribute__((constructor)) static void test__reg_##name(void)                                \
    {                                                                                              \
        if (test__ncases < TEST_MAX)                                                               \
            test__cases[test__ncases++] = (test_case){#name, test_##name};                         \
    }                                                                                              \
    static void test_##name(void)

#define TEST__FAIL(...)                                                                            \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__);                              \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        fflush(stderr);                                                                            \
        abort();                                                                                   \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            TEST__FAIL("%s", #cond);                                                               \
    } while (0)

#define CHECK_OP(a, op, b)                                                                         \
    do {                                                                                           \
        int64_t test__a = (int64_t)(a), test__b = (int64_t)(b);                                    \
        if (!(test__a op test__b))                                                                 \
            TEST__FAIL("%s %s %s (%" PRId64 " vs %" PRId64 ")", #a, #op, #b, test__a, test__b);    \
    } while (0)
#define CHECK_EQ(a, b) CHECK_OP(a, ==, b)
#define CHECK_NE(a, b) CHECK_OP(a, !=, b)
#define CHECK_LT(a, b) CHECK_OP(a, <, b)
#define CHECK_LE(a, b) CHECK_OP(a, <=, b)
#define CHECK_GT(a, b) CHECK_OP(a, >, b)
#define CHECK_GE(a, b) CHECK_OP(a, >=, b)
#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *test__sa = (a), *test__sb = (b);                                               \
        if (strcmp(test__sa, test__sb) != 0)                                                       \
            TEST__FAIL("%s == %s (\"%s\" vs \"%s\")", #a, #b, test__sa, test__sb);                 \
    } while (0)
/* needle occurs in hay (a NULL hay fails). */
#define CHECK_HAS(hay, needle)                                                                     \
    do {                                                                                           \
        const char *test__h = (hay), *test__n = (needle);                                          \
        if (!test__h || !strstr(test__h, test__n))                                                 \
            TEST__FAIL("\"%s\" in \"%s\"", test__n, test__h ? test__h : "(null)");                 \
    } while (0)

#define TEST_MAIN()                                                                                \
    test_case test__cases[TEST_MAX];                                                               \
    int test__ncases;                                                                              \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        int ran = 0;                                                                               \
        setvbuf(stdout, NULL, _IONBF, 0);                                                          \
        for (int i = 0; i < test__ncases; i++) {                                                   \
            if (argc > 1 && strcmp(argv[1], test__cases[i].name) != 0)                             \
                continue;                                                                          \
            printf("[ RUN  ] %s\n", test__cases[i].name);                                          \
            test__cases[i].fn();                                                                   \
            printf("[  OK  ] %s\n", test__cases[i].name);                                          \
            ran++;                                                                                 \
        }                                                                                          \
        printf("%d passed, 0 failed\n", ran);                                                      \
        return ran > 0 ? 0 : 1;                                                                    \
    }

#endif
