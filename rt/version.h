/* The one version string of ddprt: every program's --version, ddprt.pc (the Makefile
 * reads it from here). */
#ifndef RT_VERSION_H
#define RT_VERSION_H
#define DDPRT_VERSION "0.1.0"

/* When an argument before "--" is --version: prints "PROGRAM (ddprt) VERSION" on stdout
 * and returns 1 (the program then exits 0). Otherwise 0. */
int rt_version_arg(int argc, char **argv);
#endif
