#include "agent_process.h"
#include <malloc.h>
#include <sys/prctl.h>

int aa_process_set_not_dumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
int aa_process_is_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
int aa_process_limit_malloc_arenas(int arenas) { return mallopt(M_ARENA_MAX, arenas); }
int aa_process_trim_heap(void) { return malloc_trim(0); }
