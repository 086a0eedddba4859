/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin_elf.c - a job plugin's identity, read from its ELF file before it
 * is loaded (plugin_elf.h). dlopen runs a library's constructors, so the
 * gate cannot ask the plugin's own code who it is: WEIR_REGISTER_JOB puts
 * the identity into an ELF note (weir/job.h), and this reads it from the
 * bytes of the file.
 *
 * Notes are found through the program headers (PT_NOTE), not the section
 * headers: program headers are what the dynamic loader itself reads, every
 * shared object has them, and `strip` keeps them. The file is untrusted:
 * every count, offset and size is checked against the file's size before
 * it is used, and the note's strings must be terminated, bounded and
 * printable before they go into a message.
 */
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "job/plugin_elf.h"
#include "weir/job.h"

#if UINTPTR_MAX == UINT64_MAX
typedef Elf64_Ehdr ehdr_t;
typedef Elf64_Phdr phdr_t;
#define HOST_CLASS ELFCLASS64
#define HOST_BITS  64
#else
typedef Elf32_Ehdr ehdr_t;
typedef Elf32_Phdr phdr_t;
#define HOST_CLASS ELFCLASS32
#define HOST_BITS  32
#endif
typedef Elf32_Nhdr nhdr_t; /* the same three 32-bit words in both classes */

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_DATA ELFDATA2LSB
#else
#define HOST_DATA ELFDATA2MSB
#endif

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__riscv)
#define HOST_MACHINE EM_RISCV
#elif defined(__i386__)
#define HOST_MACHINE EM_386
#elif defined(__arm__)
#define HOST_MACHINE EM_ARM
#else
#define HOST_MACHINE EM_NONE /* unknown here: not checked (the loader will) */
#endif

static int fail(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *msg, size_t msglen, const char *fmt, ...)
{
    if (msg && msglen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msglen, fmt, ap);
        va_end(ap);
    }
    return -ENOEXEC;
}

static const char *machine_name(unsigned m)
{
    switch (m) {
    case EM_X86_64:
        return "x86_64";
    case EM_AARCH64:
        return "aarch64";
    case EM_RISCV:
        return "riscv";
    case EM_386:
        return "i386";
    case EM_ARM:
        return "arm";
    case EM_PPC64:
        return "ppc64";
    case EM_S390:
        return "s390";
    default:
        return "another machine";
    }
}

/* Copy the NUL-terminated printable string at *p (up to end) into dst[cap];
 * advance *p past its NUL. 0, or -1 when unterminated, too long or not
 * printable ASCII. */
static int take_str(const unsigned char **p, const unsigned char *end, char *dst, size_t cap)
{
    const unsigned char *s = *p;
    size_t n = 0;
    while (s + n < end && s[n] != '\0') {
        if (s[n] < 0x20 || s[n] > 0x7e || n + 1 >= cap)
            return -1;
        n++;
    }
    if (s + n >= end || n == 0)
        return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    *p = s + n + 1;
    return 0;
}

/* The desc of a weir note: int32 ABI version, then fingerprint, target and
 * toolchain as NUL-terminated strings, then zero padding. */
static int decode_desc(const unsigned char *d, size_t len, weir__plugin_note *out)
{
    if (len < sizeof(int32_t))
        return -1;
    int32_t v;
    memcpy(&v, d, sizeof(v));
    out->version = v;
    const unsigned char *p = d + sizeof(v), *end = d + len;
    if (take_str(&p, end, out->fingerprint, sizeof(out->fingerprint)) ||
        take_str(&p, end, out->target, sizeof(out->target)) ||
        take_str(&p, end, out->toolchain, sizeof(out->toolchain)))
        return -1;
    for (; p < end; p++)
        if (*p)
            return -1;
    return 0;
}

static size_t pad(size_t n, size_t align)
{
    return (n + align - 1) & ~(align - 1);
}

/* Walk the notes of one PT_NOTE segment [seg, seg + len). 1 when the weir
 * note was found (into *out), 0 when not, -1 when the segment is damaged
 * or the weir note in it is. */
static int scan_notes(const unsigned char *seg, size_t len, size_t align, weir__plugin_note *out)
{
    static const char name[] = WEIR__PLUGIN_NOTE_NAME;
    /* Zeros to the end are padding, not notes: an instrumented build
     * (ASan's redzone after a global) pads the weir note's section. Found
     * once, from the end (a rescan before each note would be quadratic in
     * a crafted segment of zero-sized notes). */
    size_t used = len; /* bytes up to the last non-zero one */
    while (used > 0 && seg[used - 1] == 0)
        used--;
    size_t off = 0;
    while (off < used) {
        nhdr_t h;
        if (len - off < sizeof(h))
            return -1;
        memcpy(&h, seg + off, sizeof(h));
        off += sizeof(h);
        size_t nsz = pad(h.n_namesz, align), dsz = pad(h.n_descsz, align);
        if (h.n_namesz > len - off || nsz > len - off)
            return -1;
        const unsigned char *nm = seg + off;
        off += nsz;
        if (h.n_descsz > len - off || dsz > len - off)
            return -1;
        const unsigned char *desc = seg + off;
        off += dsz;
        if (h.n_type == WEIR__PLUGIN_NOTE_TYPE && h.n_namesz == sizeof(name) &&
            memcmp(nm, name, sizeof(name)) == 0)
            return decode_desc(desc, h.n_descsz, out) ? -1 : 1;
    }
    return 0;
}

int weir__plugin_elf_identity(const unsigned char *file, size_t size, weir__plugin_note *out,
                              char *msg, size_t msglen)
{
    if (msg && msglen)
        msg[0] = '\0';
    if (size < EI_NIDENT || memcmp(file, ELFMAG, SELFMAG) != 0)
        return fail(msg, msglen, "not an ELF file (not a shared library)");
    if (file[EI_CLASS] != HOST_CLASS)
        return fail(msg, msglen, "a %s ELF file, weir is %d-bit",
                    file[EI_CLASS] == ELFCLASS32   ? "32-bit"
                    : file[EI_CLASS] == ELFCLASS64 ? "64-bit"
                                                   : "damaged (unknown class)",
                    HOST_BITS);
    if (file[EI_DATA] != HOST_DATA)
        return fail(msg, msglen, "ELF file of another byte order than weir's");
    if (file[EI_VERSION] != EV_CURRENT)
        return fail(msg, msglen, "damaged ELF file (unknown ELF version %u)", file[EI_VERSION]);
    ehdr_t eh;
    if (size < sizeof(eh))
        return fail(msg, msglen, "truncated ELF file (%zu bytes, shorter than its header)", size);
    memcpy(&eh, file, sizeof(eh));
    if (eh.e_type != ET_DYN)
        return fail(msg, msglen, "not a shared object (ELF type %u%s)", eh.e_type,
                    eh.e_type == ET_EXEC  ? ", an executable"
                    : eh.e_type == ET_REL ? ", an object file"
                                          : "");
    if (HOST_MACHINE != EM_NONE && eh.e_machine != HOST_MACHINE)
        return fail(msg, msglen, "built for %s (ELF machine %u), weir runs on %s (%u)",
                    machine_name(eh.e_machine), eh.e_machine, machine_name(HOST_MACHINE),
                    HOST_MACHINE);
    if (eh.e_phentsize != sizeof(phdr_t) || eh.e_phnum == 0 || eh.e_phnum == PN_XNUM)
        return fail(msg, msglen, "damaged ELF file (program header size %u, count %u)",
                    eh.e_phentsize, eh.e_phnum);
    if (eh.e_phoff > size || (size_t)eh.e_phnum * sizeof(phdr_t) > size - eh.e_phoff)
        return fail(msg, msglen,
                    "truncated or damaged ELF file (program headers past its end, %zu bytes)",
                    size);
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        phdr_t ph;
        memcpy(&ph, file + eh.e_phoff + (size_t)i * sizeof(ph), sizeof(ph));
        if (ph.p_type != PT_NOTE)
            continue;
        if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)
            return fail(msg, msglen,
                        "truncated or damaged ELF file (a note segment past its end, %zu bytes)",
                        size);
        /* Notes in an 8-aligned segment are padded to 8 (GNU property notes). */
        int r = scan_notes(file + ph.p_offset, ph.p_filesz, ph.p_align == 8 ? 8 : 4, out);
        if (r < 0)
            return fail(msg, msglen,
                        "damaged ELF notes (a note's sizes run past its segment, or "
                        "the weir note does not hold a version and three strings)");
        if (r > 0)
            return 0;
    }
    return fail(msg, msglen,
                "not a weir job plugin of this weir: no weir identity note (a job registers with "
                "WEIR_REGISTER_JOB; a plugin built against an older weir must be rebuilt against "
                "this one)");
}
