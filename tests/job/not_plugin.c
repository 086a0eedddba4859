/* SPDX-License-Identifier: Apache-2.0 */
/* not_plugin.c - a shared library that is not a weir job (no handshake):
 * the loader must refuse it by name. */
int weir_test_not_a_job(void);
int weir_test_not_a_job(void)
{
    return 42;
}
