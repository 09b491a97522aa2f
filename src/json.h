/* json.h: writing JSON text, shared by the program's --json output and the
 * core's (divtrace report --json). */
#ifndef DT_JSON_H
#define DT_JSON_H

#include <stdio.h>

/* s as a JSON string: quotes and backslashes escaped, control characters as
 * \u00XX, other bytes as they are; NULL as "". */
void json_put_str(FILE *f, const char *s);
/* v with all its digits, null when it is not finite. */
void json_put_num(FILE *f, double v);

#endif
