/*  kvt_cmd.h — subcommands of the `kvtier` tool. Each returns the process
    exit status: 0 success, 1 the job failed (e.g. a wrong resume), 2 bad
    usage (a message names the flag or value). argv[0] is the subcommand. */
#ifndef KVT_CMD_H_INCLUDED
#define KVT_CMD_H_INCLUDED

int kvt_cmd_replay(int argc, char **argv);
int kvt_cmd_rank(int argc, char **argv);
int kvt_cmd_version(int argc, char **argv);
int kvt_cmd_inspect(int argc, char **argv);
int kvt_cmd_bench_gather(int argc, char **argv);
int kvt_cmd_bench_store(int argc, char **argv);
int kvt_cmd_bench_rank(int argc, char **argv);
int kvt_cmd_bench_admit(int argc, char **argv);
int kvt_cmd_chaos(int argc, char **argv);
int kvt_cmd_keygen(int argc, char **argv);

#endif
