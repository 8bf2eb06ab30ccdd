/* pretok_table.c — the GGUF pre-tokenizer families: each tokenizer.ggml.pre name llama.cpp's
 * vocabulary loader accepts, mapped to the regexes it splits text with (applied in turn, each
 * splitting the pieces of the previous; matches and the gaps between them both become pieces)
 * and the vocabulary flags that go with the name (docs/tokenizer-fidelity.md).
 *
 * The regexes are those of the models' own tokenizer.json files, in PCRE2 syntax (compiled
 * with UTF + UCP). Where llama.cpp runs a pattern without Unicode categories through
 * std::wregex in the "C" locale, \s \d \b are ASCII there, and the pattern is written with
 * ASCII classes here so PCRE2's Unicode \s \d do not widen it. Patterns llama.cpp implements by
 * hand are written out in full: Kimi-K2's (class intersections as lookaheads) and the digit
 * grouping of afmoe / tiny_aya (runs of \p{N} cut into threes from the right). */
#include "tok_internal.h"

/* contractions as llama.cpp writes them (std::regex has no inline (?i)) */
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_WS_TAIL "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* an upper-case run then lower case, or the reverse, as llama.cpp rewrites the \p{Lu} / \p{Ll}
 * classes; C is what may follow each (Tekken nothing, GPT-4o an optional contraction) */
#define RE_LOWER_UPPER(C)                                                                         \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" C                         \
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" C
#define RE_CASED(M)                                                                               \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}" M "]*[\\p{Ll}\\p{Lm}\\p{Lo}" M "]+" RE_CONTRACTIONS \
    "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}" M "]+[\\p{Ll}\\p{Lm}\\p{Lo}" M "]*" RE_CONTRACTIONS "?"
#define RE_DIGITS_BY_3 "\\p{N}{1,3}(?=(?:\\p{N}{3})*(?!\\p{N}))"
#define RE_DEEPSEEK3_WORDS                                                                          \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
#define RE_CJK_KANA "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+"
#define ASCII_S_CHARS "\\t\\n\\x0B\\f\\r "
#define ASCII_S "[" ASCII_S_CHARS "]"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
static const char *const GPT2[] = {RE_GPT2, NULL};
static const char *const DEFAULT[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const LLAMA3[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" RE_WS_TAIL, NULL};
static const char *const JAIS2[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
                    "|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)"
                    "|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    NULL};
#define RE_QWEN2 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" RE_WS_TAIL
static const char *const QWEN2[] = {RE_QWEN2, NULL};
static const char *const QWEN35[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" RE_WS_TAIL,
    NULL};
static const char *const UFAKZEKA[] = {
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" RE_WS_TAIL, NULL};
static const char *const SEED_CODER[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|" RE_WS_TAIL, NULL};
static const char *const MINICPM5[] = {
    "\\p{N}{1,3}",
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" RE_WS_TAIL, NULL};
static const char *const LAGUNA[] = {"[^\\n]+|[\\n]+", RE_QWEN2, NULL};
static const char *const BAILINGMOE[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const EXAONE_MOE[] = {
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?"
                    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const DEEPSEEK_LLM[] = {
    "[\\r\\n]",
    ASCII_S "?[A-Za-z\xC2\xB5\xC3\x80-\xC3\x96\xC3\x98-\xC3\xB6\xC3\xB8-\xC6\xBA\xC6\xBC-\xC6\xBF\xC7\x84-\xCA\x93"
    "\xCA\x95-\xCA\xAF\xCD\xB0-\xCD\xB3\xCD\xB6\xCD\xB7\xCD\xBB-\xCD\xBD\xCD\xBF\xCE\x86\xCE\x88-\xCE\x8A\xCE\x8C"
    "\xCE\x8E-\xCE\xA1\xCE\xA3-\xCF\xB5\xCF\xB7-\xD2\x81\xD2\x8A-\xD4\xAF\xD4\xB1-\xD5\x96\xE1\x82\xA0-\xE1\x83\x85"
    "\xE1\x8E\xA0-\xE1\x8F\xB5\xE1\x8F\xB8-\xE1\x8F\xBD\xE1\xB2\x90-\xE1\xB2\xBA\xE1\xB2\xBD-\xE1\xB2\xBF"
    "\xE1\xB4\x80-\xE1\xB4\xAB\xE1\xB5\xAB-\xE1\xB5\xB7\xE1\xB5\xB9-\xE1\xB6\x9A\xE1\xB8\x80-\xE1\xBC\x95"
    "\xE1\xBC\x98-\xE1\xBC\x9D\xE1\xBC\xA0-\xE1\xBD\x85\xE1\xBD\x88-\xE1\xBD\x8D\xE1\xBD\x90-\xE1\xBD\x97"
    "\xE1\xBD\x99\xE1\xBD\x9B\xE1\xBD\x9D\xE1\xBD\x9F-\xE1\xBD\xBD\xE1\xBE\x80-\xE1\xBE\xB4\xE1\xBE\xB6-\xE1\xBE\xBC"
    "\xE1\xBE\xBE\xE1\xBF\x82-\xE1\xBF\x84\xE1\xBF\x86-\xE1\xBF\x8C\xE1\xBF\x90-\xE1\xBF\x93\xE1\xBF\x96-\xE1\xBF\x9B"
    "\xE1\xBF\xA0-\xE1\xBF\xAC\xE1\xBF\xB2-\xE1\xBF\xB4\xE1\xBF\xB6-\xE1\xBF\xBC\xE2\x84\x82\xE2\x84\x87"
    "\xE2\x84\x8A-\xE2\x84\x93\xE2\x84\x95\xE2\x84\x99-\xE2\x84\x9D\xE2\x84\xA4\xE2\x84\xA6\xE2\x84\xA8"
    "\xE2\x84\xAA-\xE2\x84\xAD\xE2\x84\xAF-\xE2\x84\xB4\xE2\x84\xB9\xE2\x84\xBC-\xE2\x84\xBF\xE2\x85\x85-\xE2\x85\x89"
    "\xE2\x85\x8E\xE2\x86\x83\xE2\x86\x84\xE2\xB0\x80-\xE2\xB1\xBB\xE2\xB1\xBE-\xE2\xB3\xA4\xE2\xB3\xAB-\xE2\xB3\xAE"
    "\xE2\xB3\xB2\xE2\xB3\xB3\xEA\x99\x80-\xEA\x99\xAD\xEA\x9A\x80-\xEA\x9A\x9B\xEA\x9C\xA2-\xEA\x9D\xAF"
    "\xEA\x9D\xB1-\xEA\x9E\x87\xEA\x9E\x8B-\xEA\x9E\x8E\xEA\xAD\xB0-\xEA\xAE\xBF\xEF\xAC\x80-\xEF\xAC\x86"
    "\xEF\xAC\x93-\xEF\xAC\x97\xEF\xBC\xA1-\xEF\xBC\xBA\xEF\xBD\x81-\xEF\xBD\x9A\xF0\x90\x90\x80-\xF0\x90\x91\x8F"
    "\xF0\x90\x92\xB0-\xF0\x90\x93\x93\xF0\x90\x93\x98-\xF0\x90\x93\xBB\xF0\x90\xB2\x80-\xF0\x90\xB2\xB2"
    "\xF0\x90\xB3\x80-\xF0\x90\xB3\xB2\xF0\x91\xA2\xA0-\xF0\x91\xA3\x9F\xF0\x9E\xA4\x80-\xF0\x9E\xA5\x83]+",
    ASCII_S "?[!-/:-~\xEF\xBC\x81-\xEF\xBC\x8F\xEF\xBC\x9A-\xEF\xBD\x9E\xE2\x80\x98-\xE2\x80\x9F\xE3\x80\x80-\xE3\x80\x82]+",
    ASCII_S "+\\z",
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+",
    "\\p{N}+",
    NULL};
static const char *const DEEPSEEK_CODER[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+",
    "\\p{N}", NULL};
static const char *const DEEPSEEK3[] = {
    "\\p{N}{1,3}", RE_CJK_KANA, RE_DEEPSEEK3_WORDS "| ?[\\p{P}\\p{S}]+[\\r\\n]*|" RE_WS_TAIL, NULL};
static const char *const SPARK2_5[] = {
    "\\p{N}{1,3}", RE_CJK_KANA, RE_DEEPSEEK3_WORDS "| ?[\\p{P}\\p{S}]+|[\\r\\n]|\\s+(?!\\S)|\\s+", "\\p{N}", NULL};
static const char *const AFMOE[] = {
    RE_DIGITS_BY_3,
    "[\xE4\xB8\x80-\xE9\xBF\xBF\xE3\x90\x80-\xE4\xB6\xBF\xE8\xB1\x88-\xEF\xAB\xBF\xE3\x81\x80-\xE3\x82\x9F"
    "\xE3\x82\xA0-\xE3\x83\xBF\xEF\xBD\xA5-\xEF\xBE\x9F\xE2\xBC\x80-\xE2\xBF\x9F\xE0\xB9\x80-\xE0\xB9\xBF"
    "\xE0\xBA\x80-\xE0\xBB\xBF\xE1\x9E\x80-\xE1\x9F\xBF\xE1\x80\x80-\xE1\x82\x9F\xEA\xA9\xA0-\xEA\xA9\xBF"
    "\xEA\xA7\xA0-\xEA\xA7\xBF\xEA\xB0\x80-\xED\x9E\xAF\xE1\x84\x80-\xE1\x87\xBF]+",
    RE_DEEPSEEK3_WORDS "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};
static const char *const YOUTU[] = {
    "[\xEA\xB0\x80-\xED\x9E\xA3\xE3\x84\xB1-\xE3\x86\x8E]+|[\xEF\xBC\x81\xE2\x80\xA6\xE2\x80\x9C\xE2\x80\x9D"
    "\xE2\x80\x98\xE2\x80\x99\xE2\x80\x94\xEF\xBC\x9A\xEF\xBC\x9B\xEF\xBC\x8C\xE3\x80\x81-\xE3\x80\xBF"
    "\xEF\xB8\xB0-\xEF\xB9\x8F]+|[\xE3\x84\x85-\xE3\x84\xAF]+|" RE_CJK_KANA,
    RE_CASED("\\p{M}") "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" RE_WS_TAIL, NULL};
static const char *const FALCON[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]", NULL};
static const char *const STARCODER[] = {"\\p{N}", RE_GPT2, NULL};
#define RE_PORO " ?[^(" ASCII_S_CHARS "|.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C)]+"
static const char *const PORO[] = {RE_PORO, NULL};
static const char *const VIKING[] = {RE_PORO, "\\p{N}", NULL};
static const char *const TEKKEN[] = {RE_LOWER_UPPER("") "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" RE_WS_TAIL, NULL};
static const char *const GPT4O[] = {RE_LOWER_UPPER(RE_CONTRACTIONS "?") "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" RE_WS_TAIL, NULL};
static const char *const GRANITE_EMB_MULTI[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+" RE_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*" RE_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" RE_WS_TAIL,
    NULL};
static const char *const TINY_AYA[] = {
    RE_DIGITS_BY_3, RE_CASED("\\p{M}") "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" RE_WS_TAIL, NULL};
static const char *const KIMI_K2[] = {
    "\\p{Han}+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])*"
    "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])+" RE_CONTRACTIONS "?"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])+"
    "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])*" RE_CONTRACTIONS "?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" RE_WS_TAIL,
    NULL};
static const char *const SUPERBPE[] = {"\\p{N}+", "(?=([0-9]{3})+(?![0-9]))", NULL};
static const char *const CHAMELEON[] = {
    "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2, NULL};
static const char *const NEWLINE_RUNS[] = {"[^\\n]+|[\\n]+", NULL};
static const char *const WHITESPACE[] = {"[^\\t\\n\\x0B\\f\\r ]+", NULL};

/* one row per llama.cpp pre-tokenizer type; names are tokenizer.ggml.pre values, space
 * separated */
static const tok_pre_family FAMILIES[] = {
    {"default", DEFAULT, 0},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano", LLAMA3,
     TOK_PRE_IGNORE_MERGES | TOK_PRE_ADD_BOS},
    {"dbrx smaug-bpe", LLAMA3, 0},
    {"glm4 chatglm-bpe", LLAMA3, TOK_PRE_NO_BOS},
    {"jais-2", JAIS2, 0},
    {"minicpm5", MINICPM5, TOK_PRE_IGNORE_MERGES},
    {"deepseek-llm", DEEPSEEK_LLM, 0},
    {"deepseek-coder", DEEPSEEK_CODER, 0},
    {"deepseek-v3 hunyuan-dense joyai-llm hy_v4", DEEPSEEK3, 0},
    {"spark2_5", SPARK2_5, 0},
    {"youtu", YOUTU, TOK_PRE_IGNORE_MERGES},
    {"falcon", FALCON, 0},
    {"starcoder refact command-r smollm codeshell exaone minerva-7b mellum2", STARCODER, 0},
    {"gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert jina-v1-en "
     "jina-v2-code roberta-bpe exaone4 mpt olmo jais trillion granite-docling",
     GPT2, 0},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2", QWEN2, 0},
    {"qwen35", QWEN35, 0},
    {"ufakzeka", UFAKZEKA, 0},
    {"seed-coder", SEED_CODER, 0},
    {"bailingmoe bailingmoe2 llada-moe", BAILINGMOE, 0},
    {"exaone-moe", EXAONE_MOE, 0},
    {"laguna", LAGUNA, 0},
    {"poro-chat bloom gpt3-finnish", PORO, 0},
    {"viking", VIKING, 0},
    {"tekken", TEKKEN, TOK_PRE_IGNORE_MERGES | TOK_PRE_ADD_BOS},
    {"gpt-4o llama4 kanana2 talkie minimax-m2", GPT4O, 0},
    {"granite-embed-multi-97m", GRANITE_EMB_MULTI, TOK_PRE_IGNORE_MERGES},
    {"tiny_aya cohere2moe", TINY_AYA, 0},
    {"kimi-k2", KIMI_K2, 0},
    {"superbpe", SUPERBPE, 0},
    {"afmoe", AFMOE, 0},
    {"chameleon", CHAMELEON, TOK_PRE_ADD_BOS},
    {"gemma4 granite-embed-multi-311m sarvam-moe", NEWLINE_RUNS, TOK_PRE_RAW_UTF8 | TOK_PRE_ESCAPE_SPACES},
    {"whitespace", WHITESPACE, TOK_PRE_RAW_UTF8},
};

static int has_name(const char *names, const char *s, size_t n) {
    for (const char *p = names; *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !memcmp(p, s, n)) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

const tok_pre_family *sp_tok_pre_family_find(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (has_name(FAMILIES[i].names, name, n)) return &FAMILIES[i];
    return NULL;
}

const tok_pre_family *sp_tok_pre_family_at(int i) {
    return i >= 0 && (size_t)i < sizeof FAMILIES / sizeof FAMILIES[0] ? &FAMILIES[i] : NULL;
}
