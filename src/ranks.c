/* ranks.c: (being written) */
#include "ranks.h"
