/* trainlog.h — the training CSV logs (`train`'s and `train-lm`'s log.csv): one header line, then
 * one row per logged step whose first field is the step. */
#ifndef SPECULA_TRAINLOG_H
#define SPECULA_TRAINLOG_H

#include "core/core.h"

/* On resume from the checkpoint of `step`: keep the header and the rows of steps <= step, drop
 * the rest and a torn last line (a run killed mid-write), so the resumed rows follow without
 * duplicates. A missing file is not an error. The file is rewritten atomically. */
int sp_tr_log_truncate(const char *path, long step, sp_err *err);

#endif
