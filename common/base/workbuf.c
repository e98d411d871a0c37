/* SPDX-License-Identifier: MIT */

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "workbuf.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23          /* Linux 5.14; older kernels refuse it, and the pages fault in as used */
#endif

#define WORKBUF_MAPPED (64u << 10)      /* from this size on, a mapping of its own (zero pages: no memset) */
#define HUGE_PAGE (2u << 20)            /* x86-64's and 4 KiB-page arm64's PMD size; elsewhere the hint is moot */

/* Before every buffer: how to give it back. 64 bytes keep the buffer as aligned as malloc()'s. */
typedef struct Head {
        void *base;                     /* the mapping, or malloc()'s block */
        size_t length;                  /* of the mapping; 0: malloc()'s */
        uint8_t pad[64 - sizeof(void *) - sizeof(size_t)];
} Head;

void *workbuf_new(size_t size) {
        if (size >= SIZE_MAX - HUGE_PAGE - 2 * sizeof(Head))
                return NULL;
        if (size < WORKBUF_MAPPED) {
                Head *h = calloc(1, sizeof(Head) + size);
                if (!h)
                        return NULL;
                h->base = h;
                return h + 1;
        }
        /*
         * The buffer starts at a huge-page boundary with its Head in the page before it; the
         * slack around it is never touched, so it costs address space only.
         */
        size_t page = (size_t) sysconf(_SC_PAGESIZE);
        size_t length = page + HUGE_PAGE + size;
        uint8_t *base = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED)
                return NULL;
        uint8_t *p = (uint8_t *) (((uintptr_t) base + page + HUGE_PAGE - 1) & ~(uintptr_t) (HUGE_PAGE - 1));
        (void) madvise(p, size, MADV_HUGEPAGE);
        (void) madvise(p, size, MADV_POPULATE_WRITE);
        Head *h = (Head *) p - 1;
        *h = (Head) { .base = base, .length = length };
        return p;
}

void workbuf_free(void *p) {
        if (!p)
                return;
        Head *h = (Head *) p - 1;
        if (h->length)
                (void) munmap(h->base, h->length);
        else
                free(h->base);
}
