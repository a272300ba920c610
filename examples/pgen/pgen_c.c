/* pgen_c: the forecast, the archiver and the workflow manager of the product-generation
 * workflow in C, interchangeable with `pgen`'s (examples/pgen/main.rs): the same CDOs,
 * attributes (examples/pgen/pgen.yaml) and marker CDOs, so any role may be either.
 *
 *   pgen_c forecast [--step-ms MS] [--info-file PATH] SHAPE     (a job of 2 ranks or more)
 *   pgen_c archiver --dir DIR SHAPE
 *   pgen_c manager --out DIR --producers N [--hold-last] [--launch spawn|sbatch]
 *                  [--product-cmd PROGRAM] [--sbatch-arg ARG] SHAPE
 *
 * SHAPE: --steps N --params 1-8 --levels L --min-size B --max-size B (pgen's defaults).
 *
 * - forecast: rank 0 serves the pool manager (mstro_pm_start; with --info-file it writes
 *   the PM info there, mode 0600, for jobs of other allocations) until the manager offers
 *   pgen/done and the forecast's ranks, the archiver and the manager have left; the other
 *   ranks offer, step by step, their share of each step's fields with their attributes,
 *   then withdraw them once the archiver offers pgen/archive-complete.
 * - archiver: hears of every forecast field before it is offered (signal-before,
 *   require-ack, with the offers made before it came), requires it, acknowledges, demands
 *   it, checks it, writes it to DIR and offers its own copy (source "archive").
 * - manager: counts the fields' OFFER events per step and starts a product job per
 *   complete step (PMIx_Spawn, or sbatch with the PM info in its environment); with
 *   --hold-last the last step's only once the forecast's N ranks have left (APP_LEAVE).
 *   Ends with pgen/done once every product is offered and the archive is complete.
 *
 * Every process runs under a PMIx host (maestro run, srun --mpi=pmix, mpirun): ranks and
 * job sizes come from PMIx, and so does the pool manager (MSTRO_WORKFLOW_NAME) unless
 * MSTRO_POOL_MANAGER_INFO or MSTRO_POOL_MANAGER_INFO_FILE names it. */
#define _DEFAULT_SOURCE /* flock */
#include "pgen.h"

#include <errno.h>
#include <fcntl.h>
#include <pmix.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *const PROG = "pgen_c";
/* How long the manager waits for all products, and rank 0 for everyone to leave (s). */
static const time_t WORKFLOW_TIMEOUT = 600;

static void die(const char *what) {
  fprintf(stderr, "%s: %s\n", PROG, what);
  exit(1);
}

static void sleep_ms(long ms) {
  struct timespec t;
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* This process's rank and its job's size, from the PMIx host. */
static void pmix_job(pmix_proc_t *me, long *rank, long *size) {
  pmix_proc_t job;
  pmix_value_t *v = NULL;
  pmix_status_t rc = PMIx_Init(me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    fprintf(stderr, "%s: no PMIx host (PMIx_Init: %s): run it with maestro run, srun --mpi=pmix "
                    "or mpirun\n", PROG, PMIx_Error_string(rc));
    exit(2);
  }
  PMIX_LOAD_PROCID(&job, me->nspace, PMIX_RANK_WILDCARD);
  rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
  if (rc != PMIX_SUCCESS || v == NULL || v->type != PMIX_UINT32) {
    fprintf(stderr, "%s: the PMIx host does not say the job's size (%s)\n", PROG,
            PMIx_Error_string(rc));
    exit(1);
  }
  *rank = (long)me->rank;
  *size = (long)v->data.uint32;
  PMIX_VALUE_RELEASE(v);
}

/* Frees an event list a poll or wait returned (NULL when there was none). */
static void dispose_events(mstro_pool_event events) {
  if (events != NULL) {
    CHECK(mstro_pool_event_dispose(events));
  }
}

/* Declares `name` and requires it: it is this process's once offered. */
static mstro_cdo expect_cdo(const char *name) {
  mstro_cdo cdo;
  CHECK(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &cdo));
  CHECK(mstro_cdo_require(cdo));
  return cdo;
}

/* Waits for the marker `cdo` (declared and required with expect_cdo) and disposes it. */
static void await_marker(mstro_cdo cdo) {
  CHECK(mstro_cdo_demand(cdo));
  CHECK(mstro_cdo_dispose(cdo));
}

/* Withdraws and disposes the `n` offered fields `cdos` and frees their `memory`. */
static void withdraw_fields(mstro_cdo *cdos, void **memory, long n) {
  long i;
  for (i = 0; i < n; i++) {
    CHECK(mstro_cdo_withdraw(cdos[i]));
    CHECK(mstro_cdo_dispose(cdos[i]));
    CHECK(mstro_mem_free(memory[i]));
  }
}

/* Offers the 0-byte marker `name` and returns once everyone who required it has it. */
static void signal_cdo(const char *name) {
  mstro_cdo cdo;
  CHECK(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &cdo));
  CHECK(mstro_cdo_seal(cdo));
  CHECK(mstro_cdo_offer(cdo));
  CHECK(mstro_cdo_withdraw(cdo));
  CHECK(mstro_cdo_dispose(cdo));
}

/* The field's index within its step and the step of `name`, if it is one of `s`'s. */
static int field_of(const struct pgen_shape *s, const char *name, long *step, long *index) {
  long st, i;
  char want[64];
  if (sscanf(name, "pgen/field/s%ld/", &st) != 1 || st < 0 || st >= s->steps) {
    return 0;
  }
  for (i = 0; i < pgen_per_step(s); i++) {
    pgen_field_name(want, sizeof want, s, st, i);
    if (strcmp(want, name) == 0) {
      *step = st;
      *index = i;
      return 1;
    }
  }
  return 0;
}

/* Declares field `i` of `step` from `source` holding `len` bytes at `data` (memory that
 * stays valid until it is withdrawn), with its attributes, sealed and offered. */
static mstro_cdo offer_field(const struct pgen_shape *s, long step, long i, const char *source,
                             void *data, int64_t len) {
  char name[64];
  mstro_cdo cdo;
  int64_t st = step, level = i % s->levels;
  uint64_t sum = fnv1a(data, (size_t)len);
  pgen_field_name(name, sizeof name, s, step, i);
  CHECK(mstro_cdo_declare(name, MSTRO_ATTR_DEFAULT, &cdo));
  CHECK(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_RAW_PTR, data, false, true));
  CHECK(mstro_cdo_attribute_set(cdo, MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE, &len, true, false));
  CHECK(mstro_cdo_attribute_set(cdo, ".user.pgen.kind", (void *)"field", true, false));
  CHECK(mstro_cdo_attribute_set(cdo, ".user.pgen.source", (void *)source, true, false));
  CHECK(mstro_cdo_attribute_set(cdo, ".user.pgen.step", &st, true, false));
  CHECK(mstro_cdo_attribute_set(cdo, ".user.pgen.param", (void *)PGEN_PARAMS[i / s->levels],
                                true, false));
  CHECK(mstro_cdo_attribute_set(cdo, ".user.pgen.level", &level, true, false));
  CHECK(mstro_cdo_attribute_set(cdo, ".user.pgen.checksum", &sum, true, false));
  CHECK(mstro_cdo_seal(cdo));
  CHECK(mstro_cdo_offer(cdo));
  return cdo;
}

/* Writes the PM info to `path` for jobs of other allocations: created exclusively, mode
 * 0600, never through a link, in one write (a reader never sees half a line), and locked
 * while this process serves (the descriptor is returned and kept open). */
static int write_info_file(const char *path, const char *info) {
  char line[8192];
  int n, fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr, "%s: --info-file %s: %s (remove a file a finished run left)\n", PROG, path,
            strerror(errno));
    exit(1);
  }
  n = snprintf(line, sizeof line, "%s\n", info);
  if (n <= 0 || (size_t)n >= sizeof line || flock(fd, LOCK_EX | LOCK_NB) != 0 ||
      write(fd, line, (size_t)n) != n) {
    fprintf(stderr, "%s: --info-file %s: cannot write the PM info\n", PROG, path);
    exit(1);
  }
  return fd;
}

/* Rank 0 of the forecast: serves the pool manager until the workflow is done and the
 * forecast's other `size - 1` ranks, the archiver and the manager have left. */
static int serve(long size, const char *info_file) {
  mstro_subscription leaves;
  mstro_cdo done;
  char *info = NULL;
  long forecast_left = 0, archiver_left = 0, manager_left = 0;
  int fd = -1;
  time_t deadline;
  CHECK(mstro_init(NULL, "pool-manager", 0));
  CHECK(mstro_pm_start());
  /* Before anyone can join: no leave is missed. */
  CHECK(mstro_subscribe(NULL, MSTRO_POOL_EVENT_APP_LEAVE, MSTRO_SUBSCRIPTION_OPTS_DEFAULT,
                        &leaves));
  CHECK(mstro_pm_getinfo(&info));
  if (info_file != NULL) {
    fd = write_info_file(info_file, info);
  }
  printf("forecast rank 0: the pool manager serves\n");
  fflush(stdout);
  done = expect_cdo(PGEN_DONE);
  await_marker(done);
  deadline = time(NULL) + WORKFLOW_TIMEOUT;
  while (forecast_left < size - 1 || archiver_left < 1 || manager_left < 1) {
    mstro_pool_event events = NULL, e;
    struct timespec until;
    mstro_status st;
    until.tv_sec = deadline;
    until.tv_nsec = 0;
    st = mstro_subscription_timedwait(leaves, &until, &events);
    if (st == MSTRO_TIMEOUT) {
      die("apps still joined 10 minutes after the workflow ended");
    }
    CHECK(st);
    for (e = events; e != NULL; e = e->next) {
      forecast_left += strcmp(e->leave.component_name, "forecast") == 0;
      archiver_left += strcmp(e->leave.component_name, "archiver") == 0;
      manager_left += strcmp(e->leave.component_name, "manager") == 0;
    }
    dispose_events(events);
  }
  CHECK(mstro_subscription_dispose(leaves));
  if (info_file != NULL) {
    unlink(info_file);
    close(fd);
  }
  printf("forecast rank 0: the workflow is done; the pool manager stops\n");
  CHECK(mstro_pm_terminate());
  free(info);
  CHECK(mstro_finalize());
  return 0;
}

static int forecast(int argc, char **argv) {
  struct pgen_shape s =
      pgen_shape(PROG, argc, argv, "forecast [--step-ms MS] [--info-file PATH]");
  long step_ms = pgen_number(PROG, argc, argv, "--step-ms", 200);
  const char *info_file = pgen_text(argc, argv, "--info-file");
  long rank, size, step, i, n = 0;
  pmix_proc_t me;
  mstro_cdo archived, *offered;
  void **memory;
  int rc;
  pmix_job(&me, &rank, &size);
  if (size < 2) {
    die("forecast needs 2 ranks or more: rank 0 serves the pool manager");
  }
  if (rank == 0) {
    rc = serve(size, info_file);
    PMIx_Finalize(NULL, 0);
    return rc;
  }
  CHECK(mstro_init(NULL, "forecast", rank));
  archived = expect_cdo(PGEN_ARCHIVED);
  offered = calloc((size_t)(s.steps * pgen_per_step(&s)), sizeof *offered);
  memory = calloc((size_t)(s.steps * pgen_per_step(&s)), sizeof *memory);
  if (offered == NULL || memory == NULL) {
    die("out of memory");
  }
  for (step = 0; step < s.steps; step++) {
    sleep_ms(step_ms);
    for (i = 0; i < pgen_per_step(&s); i++) {
      char name[64];
      int64_t len;
      if (i % (size - 1) != rank - 1) {
        continue;
      }
      pgen_field_name(name, sizeof name, &s, step, i);
      len = pgen_field_size(&s, name);
      CHECK(mstro_mem_alloc((size_t)len, &memory[n]));
      pgen_field_compute(name, memory[n], len);
      offered[n] = offer_field(&s, step, i, "forecast", memory[n], len);
      n++;
    }
  }
  printf("forecast rank %ld: offered %ld fields of %ld steps\n", rank, n, s.steps);
  fflush(stdout);
  /* The archive holds a copy of everything: the forecast can go. */
  await_marker(archived);
  withdraw_fields(offered, memory, n);
  printf("forecast rank %ld: withdrew its fields and leaves\n", rank);
  free(offered);
  free(memory);
  CHECK(mstro_finalize());
  PMIx_Finalize(NULL, 0);
  return 0;
}

static int archiver(int argc, char **argv) {
  struct pgen_shape s = pgen_shape(PROG, argc, argv, "archiver --dir DIR");
  const char *dir = pgen_text(argc, argv, "--dir");
  long total = s.steps * pgen_per_step(&s), n = 0, k, step, i;
  mstro_cdo done, archived, *kept, *wanted;
  void **memory;
  char *seen;
  mstro_cdo_selector sel;
  mstro_subscription sub;
  if (dir == NULL) {
    die("archiver: give --dir DIR");
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: %s: %s\n", PROG, dir, strerror(errno));
    return 1;
  }
  kept = calloc((size_t)total, sizeof *kept);
  wanted = calloc((size_t)total, sizeof *wanted);
  memory = calloc((size_t)total, sizeof *memory);
  seen = calloc((size_t)total, 1);
  if (kept == NULL || wanted == NULL || memory == NULL || seen == NULL) {
    die("out of memory");
  }
  CHECK(mstro_init(NULL, "archiver", 0));
  done = expect_cdo(PGEN_DONE);
  CHECK(mstro_cdo_selector_create(NULL, ".user.pgen.", PGEN_FORECAST_FIELDS, &sel));
  CHECK(mstro_subscribe(sel, MSTRO_POOL_EVENT_OFFER,
                        MSTRO_SUBSCRIPTION_OPTS_SIGNAL_BEFORE |
                            MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK |
                            MSTRO_SUBSCRIPTION_OPTS_NO_LOCAL_EVENTS |
                            MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE,
                        &sub));
  CHECK(mstro_cdo_selector_dispose(sel));
  while (n < total) {
    mstro_pool_event events = NULL, e;
    long first = n, count = 0;
    CHECK(mstro_subscription_wait(sub, &events));
    /* Required before the offers take effect: the data is ours to fetch even if the
     * forecast withdraws at once. */
    for (e = events; e != NULL; e = e->next) {
      if (field_of(&s, e->offer.cdo_name, &step, &i) && !seen[step * pgen_per_step(&s) + i]) {
        seen[step * pgen_per_step(&s) + i] = 1;
        wanted[first + count++] = expect_cdo(e->offer.cdo_name);
      }
    }
    CHECK(mstro_subscription_ack(sub, events));
    dispose_events(events);
    for (k = first; k < first + count; k++) {
      const char *name = NULL;
      enum mstro_cdo_attr_value_type ty;
      void *data = NULL;
      int64_t len = -1;
      char path[4096], *c;
      FILE *f;
      CHECK(mstro_cdo_demand(wanted[k]));
      CHECK(mstro_cdo_access_ptr(wanted[k], &data, &len));
      CHECK(mstro_cdo_attribute_get(wanted[k], MSTRO_ATTR_CORE_CDO_NAME, &ty,
                                    (const void **)&name));
      if (!field_of(&s, name, &step, &i) || !pgen_is_field(&s, name, data, len)) {
        fprintf(stderr, "%s: %s: not the forecast's bytes\n", PROG, name);
        return 1;
      }
      snprintf(path, sizeof path, "%s/%s", dir, name);
      for (c = path + strlen(dir) + 1; *c != '\0'; c++) {
        *c = *c == '/' ? '_' : *c;
      }
      f = fopen(path, "wb");
      if (f == NULL || fwrite(data, 1, (size_t)len, f) != (size_t)len || fclose(f) != 0) {
        fprintf(stderr, "%s: %s: %s\n", PROG, path, strerror(errno));
        return 1;
      }
      CHECK(mstro_mem_alloc((size_t)len, &memory[k]));
      memcpy(memory[k], data, (size_t)len);
      CHECK(mstro_cdo_dispose(wanted[k]));
      kept[k] = offer_field(&s, step, i, "archive", memory[k], len);
    }
    n += count;
  }
  CHECK(mstro_subscription_dispose(sub));
  printf("archiver: %ld fields written to %s and offered\n", n, dir);
  fflush(stdout);
  CHECK(mstro_cdo_declare(PGEN_ARCHIVED, MSTRO_ATTR_DEFAULT, &archived));
  CHECK(mstro_cdo_seal(archived));
  CHECK(mstro_cdo_offer(archived));
  await_marker(done);
  withdraw_fields(kept, memory, n);
  CHECK(mstro_cdo_withdraw(archived));
  CHECK(mstro_cdo_dispose(archived));
  free(kept);
  free(wanted);
  free(memory);
  free(seen);
  CHECK(mstro_finalize());
  return 0;
}

/* How the manager starts product jobs. */
struct starter {
  const char *launch, *out, *program;
  char **sbatch_args;
  int nsbatch_args;
  const struct pgen_shape *shape;
};

/* The product job's arguments (a NULL-terminated array of `pmix_argv` strings). */
static char **product_argv(const struct starter *st, long step) {
  char **argv = NULL, num[32];
  const char *names[] = {"--steps", "--params", "--levels", "--min-size", "--max-size"};
  long values[5];
  int i;
  pmix_status_t rc;
  values[0] = st->shape->steps;
  values[1] = st->shape->params;
  values[2] = st->shape->levels;
  values[3] = st->shape->min;
  values[4] = st->shape->max;
  snprintf(num, sizeof num, "%ld", step);
  PMIX_ARGV_APPEND(rc, argv, st->program);
  PMIX_ARGV_APPEND(rc, argv, "--step");
  PMIX_ARGV_APPEND(rc, argv, num);
  PMIX_ARGV_APPEND(rc, argv, "--out");
  PMIX_ARGV_APPEND(rc, argv, st->out);
  for (i = 0; i < 5; i++) {
    snprintf(num, sizeof num, "%ld", values[i]);
    PMIX_ARGV_APPEND(rc, argv, names[i]);
    PMIX_ARGV_APPEND(rc, argv, num);
  }
  if (rc != PMIX_SUCCESS) {
    die("out of memory");
  }
  return argv;
}

/* The environment product jobs get: this process's (without its Slurm job's variables,
 * for sbatch) plus how to find the pool manager. */
static char **product_env(int for_sbatch) {
  char **env = NULL, **v;
  pmix_status_t rc = PMIX_SUCCESS;
  for (v = environ; *v != NULL; v++) {
    if (for_sbatch && strncmp(*v, "SLURM_", 6) == 0 && strncmp(*v, "SLURM_CONF=", 11) != 0) {
      continue; /* a job of its own: not the manager's CPU binding or node list */
    }
    PMIX_ARGV_APPEND(rc, env, *v);
  }
  if (rc != PMIX_SUCCESS) {
    die("out of memory");
  }
  return env;
}

/* `s` quoted for sh into `out` (of `len` bytes); 0 if it does not fit. */
static int sh_quote(char *out, size_t len, const char *s) {
  size_t n = 0;
  if (len < 3) {
    return 0;
  }
  out[n++] = '\'';
  for (; *s != '\0'; s++) {
    if (n + 6 >= len) {
      return 0;
    }
    if (*s == '\'') {
      memcpy(out + n, "'\\''", 4);
      n += 4;
    } else {
      out[n++] = *s;
    }
  }
  out[n++] = '\'';
  out[n] = '\0';
  return 1;
}

/* Submits the product job of `step` with sbatch (its own allocation): the job script on
 * sbatch's standard input, the PM info in its environment (never on a command line). */
static void submit_product(const struct starter *st, long step, char **argv) {
  char script[16384] = "#!/bin/sh\nexec srun --mpi=pmix -n 1", word[4096], name[32];
  char **args = NULL, **env = product_env(1);
  int fds[2], i, status;
  pmix_status_t rc;
  pid_t pid;
  posix_spawn_file_actions_t fa;
  size_t used;
  for (i = 0; argv[i] != NULL; i++) {
    used = strlen(script);
    if (!sh_quote(word, sizeof word, argv[i]) || used + strlen(word) + 3 >= sizeof script) {
      die("manager: a product job's command line is too long");
    }
    script[used] = ' ';
    strcpy(script + used + 1, word);
  }
  strcat(script, "\n");
  snprintf(name, sizeof name, "pgen-s%ld", step);
  PMIX_ARGV_APPEND(rc, args, "sbatch");
  PMIX_ARGV_APPEND(rc, args, "--parsable");
  PMIX_ARGV_APPEND(rc, args, "--job-name");
  PMIX_ARGV_APPEND(rc, args, name);
  PMIX_ARGV_APPEND(rc, args, "--ntasks");
  PMIX_ARGV_APPEND(rc, args, "1");
  for (i = 0; i < st->nsbatch_args; i++) {
    PMIX_ARGV_APPEND(rc, args, st->sbatch_args[i]);
  }
  if (rc != PMIX_SUCCESS) {
    die("out of memory");
  }
  if (pipe(fds) != 0 || posix_spawn_file_actions_init(&fa) != 0 ||
      posix_spawn_file_actions_adddup2(&fa, fds[0], 0) != 0 ||
      posix_spawn_file_actions_addclose(&fa, fds[1]) != 0) {
    die("manager: cannot set up sbatch's input");
  }
  if (posix_spawnp(&pid, "sbatch", &fa, NULL, args, env) != 0) {
    die("manager: cannot run sbatch (is this a Slurm cluster's node?)");
  }
  close(fds[0]);
  used = strlen(script);
  if (write(fds[1], script, used) != (ssize_t)used) {
    die("manager: cannot hand sbatch the job script");
  }
  close(fds[1]);
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s: sbatch for step %ld failed\n", PROG, step);
    exit(1);
  }
  printf("manager: step %ld: batch job submitted\n", step);
  posix_spawn_file_actions_destroy(&fa);
  PMIX_ARGV_FREE(args);
  PMIX_ARGV_FREE(env);
}

/* Starts the product-generation job of `step`. */
static void start_product(const struct starter *st, long step) {
  char **argv = product_argv(st, step);
  if (strcmp(st->launch, "sbatch") == 0) {
    submit_product(st, step, argv);
    PMIX_ARGV_FREE(argv);
  } else {
    pmix_app_t *app;
    char nspace[PMIX_MAX_NSLEN + 1];
    pmix_status_t rc;
    PMIX_APP_CREATE(app, 1);
    app->cmd = strdup(st->program);
    app->argv = argv;
    app->env = product_env(0);
    app->maxprocs = 1;
    rc = PMIx_Spawn(NULL, 0, app, 1, nspace);
    PMIX_APP_FREE(app, 1);
    if (rc != PMIX_SUCCESS) {
      fprintf(stderr, "%s: PMIx_Spawn of step %ld's product job: %s (use --launch sbatch "
                      "where the PMIx host does not spawn)\n", PROG, step, PMIx_Error_string(rc));
      exit(1);
    }
    printf("manager: step %ld: job %s spawned\n", step, nspace);
  }
}

/* The product program by default: pgen_product beside this program. */
static char *default_product(void) {
  static char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
  char *slash;
  if (n <= 0) {
    die("manager: give --product-cmd PROGRAM");
  }
  path[n] = '\0';
  slash = strrchr(path, '/');
  strcpy(slash != NULL ? slash + 1 : path, "pgen_product");
  return path;
}

static int manager(int argc, char **argv) {
  struct pgen_shape s = pgen_shape(PROG, argc, argv, "manager --out DIR --producers N");
  struct starter st;
  long producers = pgen_number(PROG, argc, argv, "--producers", 0);
  int hold_last = pgen_flag(argc, argv, "--hold-last"), i;
  long step, products = 0, forecast_left = 0, *offered;
  char *started;
  mstro_cdo_selector fields_sel, products_sel;
  mstro_subscription fields, made, leaves;
  mstro_cdo archived;
  time_t deadline = time(NULL) + WORKFLOW_TIMEOUT;
  pmix_proc_t me;
  long rank, size;
  st.launch = pgen_text(argc, argv, "--launch") ? pgen_text(argc, argv, "--launch") : "spawn";
  st.out = pgen_text(argc, argv, "--out");
  st.program = pgen_text(argc, argv, "--product-cmd");
  st.program = st.program != NULL ? st.program : default_product();
  st.shape = &s;
  st.sbatch_args = calloc((size_t)argc, sizeof *st.sbatch_args);
  st.nsbatch_args = 0;
  for (i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--sbatch-arg") == 0) {
      st.sbatch_args[st.nsbatch_args++] = argv[i + 1];
    }
  }
  if (st.out == NULL || producers < 1 ||
      (strcmp(st.launch, "spawn") != 0 && strcmp(st.launch, "sbatch") != 0)) {
    die("usage: pgen_c manager --out DIR --producers N [--hold-last] [--launch spawn|sbatch] "
        "[--product-cmd PROGRAM] [--sbatch-arg ARG]...");
  }
  if (mkdir(st.out, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: %s: %s\n", PROG, st.out, strerror(errno));
    return 1;
  }
  offered = calloc((size_t)s.steps, sizeof *offered);
  started = calloc((size_t)s.steps, 1);
  if (offered == NULL || started == NULL || st.sbatch_args == NULL) {
    die("out of memory");
  }
  pmix_job(&me, &rank, &size);
  CHECK(mstro_init(NULL, "manager", rank));
  CHECK(mstro_cdo_selector_create(NULL, ".user.pgen.", PGEN_FORECAST_FIELDS, &fields_sel));
  CHECK(mstro_cdo_selector_create(NULL, ".user.pgen.", "(kind = \"product\")", &products_sel));
  CHECK(mstro_subscribe(fields_sel, MSTRO_POOL_EVENT_OFFER, MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE,
                        &fields));
  CHECK(mstro_subscribe(products_sel, MSTRO_POOL_EVENT_OFFER,
                        MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE, &made));
  CHECK(mstro_subscribe(NULL, MSTRO_POOL_EVENT_APP_LEAVE, MSTRO_SUBSCRIPTION_OPTS_DEFAULT,
                        &leaves));
  CHECK(mstro_cdo_selector_dispose(fields_sel));
  CHECK(mstro_cdo_selector_dispose(products_sel));
  while (products < s.steps) {
    mstro_pool_event events, e;
    int quiet = 1;
    if (time(NULL) > deadline) {
      fprintf(stderr, "%s: %ld of %ld products after %ld s\n", PROG, products, s.steps,
              (long)WORKFLOW_TIMEOUT);
      return 1;
    }
    CHECK(mstro_subscription_poll(fields, &events));
    for (e = events; e != NULL; e = e->next) {
      long index;
      quiet = 0;
      if (field_of(&s, e->offer.cdo_name, &step, &index)) {
        offered[step]++;
      }
    }
    dispose_events(events);
    CHECK(mstro_subscription_poll(leaves, &events));
    for (e = events; e != NULL; e = e->next) {
      quiet = 0;
      forecast_left += strcmp(e->leave.component_name, "forecast") == 0;
    }
    dispose_events(events);
    CHECK(mstro_subscription_poll(made, &events));
    for (e = events; e != NULL; e = e->next) {
      quiet = 0;
      products++;
      printf("manager: %s is made\n", e->offer.cdo_name);
    }
    dispose_events(events);
    for (step = 0; step < s.steps; step++) {
      int last = step == s.steps - 1;
      int held = hold_last && last && forecast_left < producers;
      if (offered[step] >= pgen_per_step(&s) && !held && !started[step]) {
        started[step] = 1;
        start_product(&st, step);
        printf("manager: step %ld complete; its product job started%s\n", step,
               hold_last && last ? " (after the forecast left: from the archive)" : "");
      }
    }
    fflush(stdout);
    if (quiet) {
      sleep_ms(50);
    }
  }
  printf("manager: all %ld products made\n", s.steps);
  fflush(stdout);
  CHECK(mstro_subscription_dispose(fields));
  CHECK(mstro_subscription_dispose(made));
  CHECK(mstro_subscription_dispose(leaves));
  archived = expect_cdo(PGEN_ARCHIVED);
  await_marker(archived);
  /* Returns once rank 0 and the archiver (both required it) have it. */
  signal_cdo(PGEN_DONE);
  free(offered);
  free(started);
  free(st.sbatch_args);
  CHECK(mstro_finalize());
  PMIx_Finalize(NULL, 0);
  return 0;
}

int main(int argc, char **argv) {
  const char *role = argc > 1 ? argv[1] : "";
  /* The role's options follow it: shift it out as argv[0]. */
  if (strcmp(role, "forecast") == 0) {
    return forecast(argc - 1, argv + 1);
  }
  if (strcmp(role, "archiver") == 0) {
    return archiver(argc - 1, argv + 1);
  }
  if (strcmp(role, "manager") == 0) {
    return manager(argc - 1, argv + 1);
  }
  fprintf(stderr, "usage: %s forecast|archiver|manager [OPTIONS] (see the comment at the top "
                  "of examples/pgen/pgen_c.c)\n", PROG);
  return 2;
}
