/* LD_PRELOAD shim for tests/security.rs: a process that claims to be root. libpmix's
 * "native" security over TCP sends the uid a process claims; with this loaded an
 * unprivileged PMIx tool or client claims uid 0 and gid 0, as a modified libpmix could.
 * The launcher must see through it (the kernel's socket table says who owns the socket). */
#include <sys/types.h>
uid_t getuid(void) { return 0; }
uid_t geteuid(void) { return 0; }
gid_t getgid(void) { return 0; }
gid_t getegid(void) { return 0; }
