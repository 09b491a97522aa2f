/* stattest.h: being written. */
#ifndef DT_STATTEST_H
#define DT_STATTEST_H
#endif
