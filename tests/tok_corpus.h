/* tok_corpus.h — the "hard" text corpus the tokenizer tests run over: English, code, CJK,
 * emoji (with ZWJ sequences), combining marks (decomposed), control characters, long
 * whitespace runs, digits, contractions, and a few scripts with marks. Entries carry their
 * length because one contains NUL. */
#ifndef SPECULA_TOK_CORPUS_H
#define SPECULA_TOK_CORPUS_H
#include <stddef.h>

typedef struct {
    const char *s;
    size_t n; /* 0: strlen(s) */
} tok_corpus_entry;

static const tok_corpus_entry tok_corpus[] = {
    {"The quick brown fox jumps over the lazy dog. It's 3:45pm, isn't it? We'll see; they'd've "
     "known.", 0},
    {"Speculative decoding drafts several tokens cheaply and verifies them with one forward pass "
     "of the target model, accepting the longest prefix that matches.\n\nSecond paragraph.", 0},
    {"int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++) {\n\t\tprintf(\"%s\\n\", "
     "argv[i]);\n    }\n    return 0; // done\n}\n", 0},
    {"def f(x):\n    return {k: v ** 2 for k, v in x.items() if v != None}  # 0x1F, 1e-9, 1_000_000\n", 0},
    {"   leading and trailing spaces   ", 0},
    {"                                                                end of a long space run", 0},
    {"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nnewlines", 0},
    {"\t\t\t\t\t\t\t\t\t\t tabs \t \t  \r\n\r\n mixed \x0b\x0c whitespace   \n", 0},
    {"日本語のテキストと中文文本，还有한국어 텍스트。", 0},
    {"我想在apple工作1314151天～ 東京タワー（とうきょうタワー）", 0},
    {"emoji: 🦙🚀😶‍🌫️👩‍👩‍👧‍👦 🇫🇷 👍🏽 ✅ ❤️", 0},
    {"combining: e\xcc\x81 a\xcc\x80 n\xcc\x83 o\xcc\x88\xcc\x81 Cu\xcc\x9b\xcc\x89" "a Vie\xcc\xa3\xcc\x82t "
     "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", 0},
    {"precomposed: é à ñ ő Cửa Việt 한 Ångström ﬁ ① ²", 0},
    {"controls: \x01\x02\x1b[31mred\x1b[0m \x7f bell\x07 del", 0},
    {"nul\0inside", 10},
    {"Ünïcödé ÄÖÜ äöü ß — “quotes” ‘single’ … • → ≤ ≥ ∑ ∫ √ ∞ ± × ÷", 0},
    {"नमस्ते दुनिया, สวัสดีชาวโลก, مرحبا بالعالم, שלום עולם, Привет мир, Γειά σου κόσμε", 0},
    {"កាន់តែពិសេសអាចខលចេញ", 0},
    {"3 33 333 3333 33333 333333 3.14159 -42 1,000,000 ١٢٣ ４５６", 0},
    {"He said 'HELLO' and I'LL go; she'S here. y'all 'tis", 0},
    {"URLs: https://example.com/a?b=c&d=e#f user@mail.org C:\\path\\to\\file.txt", 0},
    {"<html><body><div class=\"x\">text</div></body></html>", 0},
    {"a", 0},
    {" ", 0},
    {"\n", 0},
    {"!!!!!!!!!!!!?????......------======", 0},
};

#define TOK_CORPUS_N ((int)(sizeof tok_corpus / sizeof tok_corpus[0]))

#endif
