/* ranks.h: (being written) */
#ifndef DT_RANKS_H
#define DT_RANKS_H
#endif
