/* lm_decl.h — the forward / backward of lm.h for one scalar type (lm_* float, lm_*_f64 double). */
LM_ACTS *LM(acts_create)(const lm_layout *lay, int NB, int T, sp_err *err);
void LM(acts_free)(LM_ACTS *a);
/* Forward over tokens[NB·T] (NB sequences of T tokens; T <= the T of acts_create). labels[NB·T]:
 * the next token of each position, −1 = not scored. Returns the mean cross-entropy over the
 * scored positions (0 when none) and keeps what backward needs. logits: if non-NULL, receives
 * the (softcapped) logits [NB·T, V]. */
double LM(forward)(sp_pool *pool, const lm_layout *lay, const real *w, LM_ACTS *a, const int32_t *tokens,
                   const int32_t *labels, int NB, int T, real *logits);
/* Backward of the last forward: ACCUMULATES d(loss)/d(w) into grad (parameter layout). */
void LM(backward)(sp_pool *pool, const lm_layout *lay, const real *w, LM_ACTS *a, real *grad);
