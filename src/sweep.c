/* sweep.c: being written. */
#include "sweep.h"
