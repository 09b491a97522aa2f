/* report.c: being written. */
#include "report.h"
