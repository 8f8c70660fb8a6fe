/*
 * hash.h - xxHash as larder includes it: Debian's libxxhash (0.8), and on
 * x86-64 the library's own runtime dispatch (xxh_x86dispatch.h), so that
 * XXH3 runs with the widest vector unit the CPU has (AVX2, AVX-512)
 * instead of the SSE2 the library is compiled for.  Same algorithm, same
 * values (the tests compute their expected checksums with the plain
 * functions).  Every sample and block larder reads is checked with XXH3,
 * so this is on every read's path: on the 2-core machine measured, 7.8
 * GB/s against 28.8 over a 1 MiB buffer in the CPU's cache (what a fill
 * checks right after receiving it), 6.5 against 8.1 over 256 MB that is
 * not (docs/architecture.md, "Layers of liblarder").  CMake defines
 * LARDER_HAVE_XXH_DISPATCH where the library exports the dispatching
 * functions (Debian's does on amd64); elsewhere this is xxhash.h alone.
 */
#ifndef LARDER_HASH_H
#define LARDER_HASH_H

#include <xxhash.h>
#ifdef LARDER_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h> /* XXH3_64bits and the rest name their _dispatch forms */
#endif

#endif
