/* ops_f64_names.h — the rename list that turns a source written with the float names of ops.h
 * and block_train.h into its double twin: a unit compiling ops_impl.h, block_train_impl.h or
 * lm_impl.h with real = double includes those headers first, then this list. */
/* the ops (ops.h) */
#define tr_linear_forward tr_linear_forward_f64
#define tr_linear_backward tr_linear_backward_f64
#define tr_rmsnorm_forward tr_rmsnorm_forward_f64
#define tr_rmsnorm_backward tr_rmsnorm_backward_f64
#define tr_rope_forward tr_rope_forward_f64
#define tr_rope_backward tr_rope_backward_f64
#define tr_attention_forward tr_attention_forward_f64
#define tr_attention_backward tr_attention_backward_f64
#define tr_swiglu_forward tr_swiglu_forward_f64
#define tr_swiglu_backward tr_swiglu_backward_f64
#define tr_geglu_forward tr_geglu_forward_f64
#define tr_geglu_backward tr_geglu_backward_f64
#define tr_softcap_forward tr_softcap_forward_f64
#define tr_softcap_backward tr_softcap_backward_f64
#define tr_markov_forward tr_markov_forward_f64
#define tr_markov_backward tr_markov_backward_f64
#define tr_gated_forward tr_gated_forward_f64
#define tr_gated_backward tr_gated_backward_f64
#define tr_rnn_forward tr_rnn_forward_f64
#define tr_rnn_backward tr_rnn_backward_f64
#define tr_gather_forward tr_gather_forward_f64
#define tr_gather_backward tr_gather_backward_f64
#define tr_conf_forward tr_conf_forward_f64
#define tr_conf_backward tr_conf_backward_f64
#define tr_lmhead_forward tr_lmhead_forward_f64
#define tr_lmhead_backward tr_lmhead_backward_f64
#define tr_softmax_rows tr_softmax_rows_f64
#define tr_ce_forward tr_ce_forward_f64
#define tr_ce_backward tr_ce_backward_f64
#define tr_spark_loss_forward tr_spark_loss_forward_f64
#define tr_spark_loss_backward tr_spark_loss_backward_f64
/* the decoder block (block_train.h) */
#define tr_block_w tr_block_w_f64
#define tr_block_g tr_block_g_f64
#define tr_block_acts tr_block_acts_f64
#define tr_block_scratch tr_block_scratch_f64
#define tr_block_io tr_block_io_f64
#define tr_block_forward tr_block_forward_f64
#define tr_block_backward tr_block_backward_f64
#define tr_block_attn_forward tr_block_attn_forward_f64
#define tr_block_mlp_forward tr_block_mlp_forward_f64
#define tr_block_attn_backward tr_block_attn_backward_f64
#define tr_block_mlp_backward tr_block_mlp_backward_f64
