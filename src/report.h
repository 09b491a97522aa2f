/* report.h: being written. */
#ifndef DT_REPORT_H
#define DT_REPORT_H
#endif
