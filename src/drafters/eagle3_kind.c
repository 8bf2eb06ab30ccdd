/* eagle3_kind.c — the eagle3 drafter kind (kind.h): identity by architectures[0] (SpecForge's
 * LlamaForCausalLMEagle3 / Eagle3LlamaForCausalLM, DeepSpec's Qwen3Eagle3Model /
 * Gemma4Eagle3Model; the loader in eagle3.c tells the layouts apart), one drafter per request
 * loaded from the checkpoint. */
#include <string.h>

#include "drafters/eagle3.h"
#include "drafters/kind.h"

int sp_eagle3_kind_detect(const sp_drafter_ident *id) {
    static const char *const names[] = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Qwen3Eagle3Model",
                                        "Gemma4Eagle3Model"};
    for (size_t i = 0; id->arch && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(id->arch, names[i])) return 1;
    return 0;
}

sp_drafter *sp_eagle3_kind_make(void *state, const sp_drafter_env *env, const sp_sample_params *sample, int max_ctx,
                                sp_err *err) {
    return sp_drafter_eagle3(env->o->dir, env->target, sample, env->o->draft_max, err);
}
