/* ops_f64_names.h — the rename list that turns a source written with the float names of ops.h
 * and block_train.h into its double twin: a unit compiling ops_impl.h, block_train_impl.h or
 * lm_impl.h with real = double includes those headers first, then this list. */
/* the ops (ops.h) */
#define sp_tr_linear_forward sp_tr_linear_forward_f64
#define sp_tr_linear_backward sp_tr_linear_backward_f64
#define sp_tr_rmsnorm_forward sp_tr_rmsnorm_forward_f64
#define sp_tr_rmsnorm_backward sp_tr_rmsnorm_backward_f64
#define sp_tr_rope_forward sp_tr_rope_forward_f64
#define sp_tr_rope_backward sp_tr_rope_backward_f64
#define sp_tr_attention_forward sp_tr_attention_forward_f64
#define sp_tr_attention_backward sp_tr_attention_backward_f64
#define sp_tr_swiglu_forward sp_tr_swiglu_forward_f64
#define sp_tr_swiglu_backward sp_tr_swiglu_backward_f64
#define sp_tr_geglu_forward sp_tr_geglu_forward_f64
#define sp_tr_geglu_backward sp_tr_geglu_backward_f64
#define sp_tr_softcap_forward sp_tr_softcap_forward_f64
#define sp_tr_softcap_backward sp_tr_softcap_backward_f64
#define sp_tr_markov_forward sp_tr_markov_forward_f64
#define sp_tr_markov_backward sp_tr_markov_backward_f64
#define sp_tr_gated_forward sp_tr_gated_forward_f64
#define sp_tr_gated_backward sp_tr_gated_backward_f64
#define sp_tr_rnn_forward sp_tr_rnn_forward_f64
#define sp_tr_rnn_backward sp_tr_rnn_backward_f64
#define sp_tr_gather_forward sp_tr_gather_forward_f64
#define sp_tr_gather_backward sp_tr_gather_backward_f64
#define sp_tr_conf_forward sp_tr_conf_forward_f64
#define sp_tr_conf_backward sp_tr_conf_backward_f64
#define sp_tr_lmhead_forward sp_tr_lmhead_forward_f64
#define sp_tr_lmhead_backward sp_tr_lmhead_backward_f64
#define sp_tr_softmax_rows sp_tr_softmax_rows_f64
#define sp_tr_ce_forward sp_tr_ce_forward_f64
#define sp_tr_ce_backward sp_tr_ce_backward_f64
#define sp_tr_spark_loss_forward sp_tr_spark_loss_forward_f64
#define sp_tr_spark_loss_backward sp_tr_spark_loss_backward_f64
/* the decoder block (block_train.h) */
#define tr_block_w tr_block_w_f64
#define tr_block_g tr_block_g_f64
#define tr_block_acts tr_block_acts_f64
#define tr_block_scratch tr_block_scratch_f64
#define tr_block_io tr_block_io_f64
#define sp_tr_block_forward sp_tr_block_forward_f64
#define sp_tr_block_backward sp_tr_block_backward_f64
#define sp_tr_block_attn_forward sp_tr_block_attn_forward_f64
#define sp_tr_block_mlp_forward sp_tr_block_mlp_forward_f64
#define sp_tr_block_attn_backward sp_tr_block_attn_backward_f64
#define sp_tr_block_mlp_backward sp_tr_block_mlp_backward_f64
