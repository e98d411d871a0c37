/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Large working buffers that live for one operation (a switch's zstd window,
 * its pipeline buffers): memory the daemon gives back when the operation
 * ends, so that its idle RSS stays small, and so is fresh at every switch.
 * Faulting fresh memory in one 4 KiB page at a time is dear (about 10 µs a
 * page in a VM: 7-18 ms for a 2.5 MiB zstd window, against 1-2 ms as a huge
 * page), so a large buffer is mapped on its own, aligned for transparent huge
 * pages (MADV_HUGEPAGE) and populated in one call (MADV_POPULATE_WRITE). Both
 * are hints: a kernel without them gives ordinary pages. Its pages count in
 * RssAnon until it is freed, all of them from the start. Small requests are
 * plain calloc().
 *
 * The contents are zero. Never fails but for memory: NULL then.
 */

#include <stddef.h>

void *workbuf_new(size_t size);
/* NULL-safe; only for what workbuf_new() returned. */
void workbuf_free(void *p);
