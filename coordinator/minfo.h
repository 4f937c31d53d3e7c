/* minfo.h - the coordinator's model facts (st_minfo: hyperparameters and
 * bytes per layer, embedding and head) have their one home in
 * common/llama.h, shared with the worker's memory check; this header only
 * keeps the coordinator's includes working. New code includes
 * common/llama.h. */
#ifndef ST_COORD_MINFO_H
#define ST_COORD_MINFO_H

#include "common/llama.h"

#endif
