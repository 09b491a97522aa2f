/* stattest.c: being written. */
#include "stattest.h"
