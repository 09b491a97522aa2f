/* cmd_report.c: `divtrace report DIR`: option parsing; the work is in
 * report.c (statistics, tables, markdown), report_summary.c (the cached
 * summaries) and report_plot.c (the PNGs). */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "html.h"
#include "report.h"
#include "util.h"

static void report_usage(FILE *f)
{
    fputs("Usage: divtrace report [OPTION]... DIR\n"
          "Summarize the study in DIR (made by divtrace sweep): per condition the trials,\n"
          "the final loss (mean of the last 50 steps), the first escape and the phases;\n"
          "the sweep file's compare lines as Welch's t-test and the Mann-Whitney U test\n"
          "with effect sizes; its pair lines as the first divergence, origin ops,\n"
          "distance crossings, escapes and an exact-oracle replay of each run at the\n"
          "first divergent step; the machines. Writes DIR/report.md, DIR/report/*.csv\n"
          "and PNG plots (with gnuplot), after turning the traces into summaries under\n"
          "DIR/summary/ (reused while current; enough on their own without the traces).\n"
          "On stdout, the files written (or, with --json, the tables).\n"
          "\n"
          "  -o, --output FILE  write the markdown to FILE instead of DIR/report.md\n"
          "      --rebuild      re-read every trace, even where its summary is current\n"
          "      --no-replay    skip the oracle replays of the pairs (they can be slow)\n"
          "      --replay-trials N  replay only trials 1 to N of each pair\n"
          "      --no-explain   no divtrace explain verdict for each pair\n"
          "  -j, --jobs N       compute N pairs at a time (default 1)\n"
          "      --json         the tables as one JSON object on stdout, in place of the\n"
          "                     list of files written (the files are written all the same)\n"
          "      --html FILE    also write the study as one self-contained HTML page:\n"
          "                     loss curves per condition; per run pair its curves,\n"
          "                     timeline, verdict and (with its traces) the heatmap\n"
          "  -q, --quiet        print nothing on stdout and no progress\n"
          "      --progress     progress as plain lines on stderr, every 10 s and at the\n"
          "                     end (on a terminal a line is rewritten in place without\n"
          "                     it)\n"
          "  -h, --help         show this help and exit\n"
          "  -V, --version      show the version and exit\n"
          "\n"
          "Exit status: 0 report written, 2 trouble (not a study directory, a bad sweep\n"
          "file, a trace or summary that cannot be read, an unwritable output).\n",
          f);
}

int cmd_report(int argc, char **argv)
{
    enum { OPT_REBUILD = 256, OPT_NO_REPLAY, OPT_REPLAY_TRIALS, OPT_JSON, OPT_NO_EXPLAIN, OPT_PROGRESS };
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"rebuild", no_argument, NULL, OPT_REBUILD},
        {"no-replay", no_argument, NULL, OPT_NO_REPLAY},
        {"replay-trials", required_argument, NULL, OPT_REPLAY_TRIALS},
        {"no-explain", no_argument, NULL, OPT_NO_EXPLAIN},
        {"jobs", required_argument, NULL, 'j'},
        {"json", no_argument, NULL, OPT_JSON},
        {"html", required_argument, NULL, 'H'},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct report_options o = {.argc = argc, .argv = argv};
    const char *html = NULL;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:j:qhV", opts, NULL)) != -1) {
        switch (c) {
        case 'o': o.output = optarg; break;
        case OPT_REBUILD: o.rebuild = 1; break;
        case OPT_NO_REPLAY: o.no_replay = 1; break;
        case OPT_REPLAY_TRIALS:
            if (cli_int("--replay-trials", optarg, 1, 1000000, &o.replay_trials) < 0) {
                cli_error("report", "%s", dt_error());
                return CLI_EXIT_TROUBLE;
            }
            break;
        case OPT_NO_EXPLAIN: o.no_explain = 1; break;
        case 'j':
            if (cli_int("--jobs", optarg, 1, 1024, &o.jobs) < 0) {
                cli_error("report", "%s", dt_error());
                return CLI_EXIT_TROUBLE;
            }
            break;
        case OPT_JSON: o.json = 1; break;
        case 'H': html = optarg; break;
        case 'q': o.quiet = 1; break;
        case OPT_PROGRESS: o.progress = 1; break;
        case 'h': report_usage(stdout); return 0;
        case 'V': return cli_version();
        default: return cli_usage_error("report");
        }
    }
    if (argc - optind != 1) {
        cli_error("report", "expected one study directory");
        return cli_usage_error("report");
    }
    o.dir = argv[optind];
    if (report_run(&o) < 0 || (html && html_write_report(html, o.dir, o.quiet || o.json) < 0)) {
        cli_error("report", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    return 0;
}
