/* safetensors_internal.h — what the safetensors reader and writer share; not a public API. */
#ifndef SPECULA_SAFETENSORS_INTERNAL_H
#define SPECULA_SAFETENSORS_INTERNAL_H

#include <stddef.h>

/* 1 when s[0..n) is strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
int sp_st_utf8_valid(const unsigned char *s, size_t n);

#endif
