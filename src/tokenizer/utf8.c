/* utf8.c — UTF-8 validation and repair, and the GPT-2 byte <-> char table (docs/TOKENIZER.md §5).
 * Validation is strict (no overlongs, no surrogates, nothing above U+10FFFF). */
#include "tok_internal.h"

int sp_tok_utf8_valid_len(const uint8_t *s, size_t n) {
    if (!n) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return 0;
    if (n < (size_t)len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* bytes of the maximal prefix of a valid sequence at s (>= 1): Unicode's "maximal subpart" */
static int maximal_subpart(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    int len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return 1;
    int k = 1;
    if (k < len && (size_t)k < n && s[k] >= lo && s[k] <= hi) k++;
    else return 1;
    while (k < len && (size_t)k < n && (s[k] & 0xC0) == 0x80) k++;
    return k;
}

int sp_tok_utf8_lossy(tok_buf *out, const char *s, size_t n, int per_byte) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, start = 0;
    if (sp_tok_buf_reserve(out, n)) return -1;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int k = sp_tok_utf8_valid_len(u + i, n - i);
        if (k) {
            i += (size_t)k;
            continue;
        }
        if (sp_tok_buf_put(out, s + start, i - start) || sp_tok_buf_put(out, fffd, 3)) return -1;
        i += per_byte ? 1 : (size_t)maximal_subpart(u + i, n - i);
        start = i;
    }
    return sp_tok_buf_put(out, s + start, n - start);
}

int sp_tok_utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

uint32_t sp_tok_utf8_get(const char *s, size_t n, int *len) {
    const uint8_t *u = (const uint8_t *)s;
    int k = sp_tok_utf8_valid_len(u, n);
    if (!k) {
        *len = 1;
        return 0xFFFD;
    }
    *len = k;
    switch (k) {
    case 1: return u[0];
    case 2: return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    case 3: return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    default:
        return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
               (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    }
}

/* GPT-2 table: printable bytes map to themselves, the other 68 to U+0100.. in byte order */
static int printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* the 68 non-printable bytes in order: 0x00..0x20 (k 0..32), 0x7F..0xA0 (k 33..66), 0xAD (67) */
uint32_t sp_tok_bytelevel_cp(uint8_t b) {
    if (printable(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int sp_tok_bytelevel_byte(uint32_t cp) {
    if (cp < 0x100) return printable((int)cp) ? (int)cp : -1;
    uint32_t k = cp - 0x100;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(0x7F + k - 33);
    if (k == 67) return 0xAD;
    return -1;
}
