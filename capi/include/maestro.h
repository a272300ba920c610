/*
 * maestro.h -- Maestro Core's C API on the Rust CDO pool (libmaestro).
 *
 * Applications of a workflow put named Core Data Objects (CDOs: bytes plus typed
 * attributes) into a pool; a pool manager (PM) matches offers with requires and demands
 * and moves the bytes with libfabric RMA; subscribers hear what happens through pool
 * events filtered by selectors over the attributes.
 *
 * Build:   cc prog.c $(pkg-config --cflags --libs maestro)
 *
 * Every function may be called from any thread. Every function returning mstro_status
 * returns MSTRO_OK or a status saying what went wrong; mstro_last_error_message() then
 * says why (the same text is logged to stderr at level warn; MSTRO_LOG_LEVEL changes the
 * level). Nothing aborts the program: bad handles, NULL pointers and calls in the wrong
 * state return statuses.
 *
 * Environment: MSTRO_WORKFLOW_NAME, MSTRO_COMPONENT_NAME, MSTRO_POOL_MANAGER_INFO,
 * MSTRO_POOL_MANAGER_RANK, MSTRO_POOL_MANAGER_WAIT, MSTRO_TIMEOUT, MSTRO_SCHEMA_PATH,
 * MSTRO_SCHEMA_LIST, MSTRO_DROP_UNKNOWN_ATTRIBUTES, MSTRO_LOG_LEVEL, MSTRO_OFI_PROVIDER,
 * MSTRO_OFI_IFACE, MSTRO_OFI_PROGRESS (docs/configuration.md lists every one).
 */
#ifndef MAESTRO_H
#define MAESTRO_H 1

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Lets the anonymous union of mstro_pool_event compile under -std=c99 -pedantic. */
#if defined(__GNUC__) || defined(__clang__)
#define MSTRO_EXTENSION_ __extension__
#else
#define MSTRO_EXTENSION_
#endif

struct timespec;

/* ---------------------------------------------------------------- status */

/** What every call returns. */
typedef enum mstro_status_ {
  MSTRO_OK = 0,        /**< success */
  MSTRO_FAIL = 1,      /**< a failure not covered below (see mstro_last_error_message) */
  MSTRO_INVARG = 2,    /**< invalid argument: NULL or disposed handle, bad name/key/value/selector */
  MSTRO_NOMEM = 3,     /**< out of memory */
  MSTRO_UNIMPL = 4,    /**< not implemented */
  MSTRO_NOT_TWICE = 5, /**< called a second time where once is allowed (mstro_init, mstro_pm_start) */
  MSTRO_TIMEOUT = 6,   /**< a wait ended first (demand, subscription wait; MSTRO_TIMEOUT seconds) */
  MSTRO_NOENT = 7,     /**< no such thing: attribute not set or in no schema, no provider left */
  MSTRO_UNINIT = 8,    /**< mstro_init was not called (or mstro_finalize was) */
  MSTRO_NO_PM = 9,     /**< the pool manager cannot be reached or is gone */
  MSTRO_INVSTATE = 10  /**< not allowed in the CDO's state (offer before seal, dispose while offered) */
} mstro_status;

/** A sentence describing status `s` (static storage). */
const char *mstro_status_description(mstro_status s);

/** Why the last call on this thread that failed failed: what was wrong and what to do
 *  (thread-local storage, valid until this thread's next failing call; "" if none). */
const char *mstro_last_error_message(void);

/* ---------------------------------------------------------------- core */

/** This library's version (static storage). */
const char *mstro_version(void);

/** Nanoseconds on a monotonic clock, for timing (origin: first call in the process). */
typedef uint64_t mstro_nanosec_t;
mstro_nanosec_t mstro_clock(void);

/** Starts Maestro in this process. NULL names fall back to MSTRO_WORKFLOW_NAME and
 *  MSTRO_COMPONENT_NAME (then "maestro" and the program's name). The pool is joined at the
 *  first operation: MSTRO_POOL_MANAGER_INFO if set; else, under a PMIx host (maestro run,
 *  srun --mpi=pmix, mpirun), the PM announced by rank MSTRO_POOL_MANAGER_RANK (default 0)
 *  or published for the workflow, waiting up to MSTRO_POOL_MANAGER_WAIT seconds (default
 *  30); else a local pool inside this process.
 *  Returns MSTRO_NOT_TWICE if initialized already, MSTRO_INVARG for bad names, variables or
 *  schemas, MSTRO_FAIL if a PMIx host refuses the process. */
mstro_status mstro_init(const char *workflow_name, const char *component_name,
                        int64_t component_index);

/** Ends Maestro in this process: ends subscriptions, forgets handles, leaves the pool
 *  (waits for the PM's goodbye, at most MSTRO_TIMEOUT), stops a PM this process runs.
 *  Always ends the instance; mstro_init may be called again. MSTRO_UNINIT if not
 *  initialized. */
mstro_status mstro_finalize(void);

/* ---------------------------------------------------------------- CDOs */

/** A CDO handle. Valid from mstro_cdo_declare until mstro_cdo_dispose. */
typedef struct mstro_cdo_ *mstro_cdo;
/** Attributes given at declare (only MSTRO_ATTR_DEFAULT is accepted). */
typedef struct mstro_cdo_attributes_ *mstro_cdo_attributes;
#define MSTRO_ATTR_DEFAULT NULL

/** Built-in attribute keys. */
#define MSTRO_ATTR_CORE_CDO_NAME ".maestro.core.cdo.name"
#define MSTRO_ATTR_CORE_CDO_RAW_PTR ".maestro.core.cdo.raw-ptr"
#define MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE ".maestro.core.cdo.scope.local-size"
#define MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER ".maestro.core.cdo.layout.order"
#define MSTRO_ATTR_CORE_CDO_LAYOUT_ELEMENT_SIZE ".maestro.core.cdo.layout.element-size"
#define MSTRO_ATTR_CORE_CDO_LAYOUT_NDIMS ".maestro.core.cdo.layout.ndims"
#define MSTRO_ATTR_CORE_CDO_LAYOUT_DIMS_SIZE ".maestro.core.cdo.layout.dims-size"
/** How long (uint64, seconds) the pool keeps a CDO whose producer withdrew it from the
 *  global file system (0: until the workflow ends; needs a PM with the GFS directory). */
#define MSTRO_ATTR_CORE_CDO_LIFETIME ".maestro.core.cdo.lifetime"
/** Keep (bool) such a CDO's file after the workflow ends, as
 *  MSTRO_TRANSPORT_GFS_DIR/maestro-persist-WORKFLOW/NAME. */
#define MSTRO_ATTR_CORE_CDO_PERSIST ".maestro.core.cdo.persist"
/** How consumers get this CDO's bytes (str, before mstro_cdo_seal): "GFS", a file under
 *  MSTRO_TRANSPORT_GFS_DIR, or "RDMA", the producer's memory, whatever
 *  MSTRO_TRANSPORT_DEFAULT says (this library's attribute; Maestro Core chooses per
 *  process only). */
#define MSTRO_ATTR_CORE_CDO_TRANSPORT ".maestro.core.cdo.transport"
#define MSTRO_ATTR_CORE_CDO_ISGROUP ".maestro.core.cdo.isgroup"
/** Whose bytes a demanded CDO holds: the providing application's "component:index"
 *  (str, set by the pool on the consumer's CDO). */
#define MSTRO_ATTR_CORE_CDO_PROVIDER ".maestro.core.cdo.provider"
/** Set to true (bool) before mstro_cdo_seal, with raw-ptr and its size lent, to have the
 *  bytes checked end to end: the library seals MSTRO_ATTR_CORE_CDO_CHECKSUM with them,
 *  and a consumer whose bytes differ gets MSTRO_FAIL from mstro_cdo_demand, not data. */
#define MSTRO_ATTR_CORE_CDO_INTEGRITY ".maestro.core.cdo.integrity"
/** The XXH3-64 checksum of a CDO's bytes (uint; set by the library, see
 *  MSTRO_ATTR_CORE_CDO_INTEGRITY). */
#define MSTRO_ATTR_CORE_CDO_CHECKSUM ".maestro.core.cdo.checksum"

/** The types of attribute values, as mstro_cdo_attribute_get reports them. */
enum mstro_cdo_attr_value_type {
  MSTRO_CDO_ATTR_VALUE_INVALID = 0,
  MSTRO_CDO_ATTR_VALUE_bool,      /**< bool*             (schema type bool())      */
  MSTRO_CDO_ATTR_VALUE_int64,     /**< int64_t*          (int(); also local-size)  */
  MSTRO_CDO_ATTR_VALUE_uint64,    /**< uint64_t*         (uint())                  */
  MSTRO_CDO_ATTR_VALUE_double,    /**< double*           (double())                */
  MSTRO_CDO_ATTR_VALUE_cstring,   /**< the const char* itself (str())              */
  MSTRO_CDO_ATTR_VALUE_timestamp, /**< mstro_timestamp*  (timestamp())             */
  MSTRO_CDO_ATTR_VALUE_blob,      /**< mstro_blob*       (blob())                  */
  MSTRO_CDO_ATTR_VALUE_pointer    /**< the data pointer itself (raw-ptr)           */
};

/** A point in time: seconds and nanoseconds since the Unix epoch (UTC); `offset` is the
 *  writer's UTC offset in minutes, informational only. */
typedef struct mstro_timestamp_ {
  uint64_t sec;
  uint32_t nsec;
  int32_t offset;
} mstro_timestamp;

/** A byte string value (schema type blob()). */
typedef struct mstro_blob_ {
  size_t len;
  const void *data;
} mstro_blob;

/** Declares a CDO named `name` (1 to 4096 bytes, no NUL) and stores its handle in *result.
 *  MSTRO_INVARG for a NULL or bad name or attributes other than MSTRO_ATTR_DEFAULT;
 *  MSTRO_UNINIT; MSTRO_NO_PM when the pool cannot be joined. */
mstro_status mstro_cdo_declare(const char *name, mstro_cdo_attributes attr, mstro_cdo *result);

/** Stages attribute `key` on a declared CDO, before seal. `val` points at the value
 *  (int64_t*, uint64_t*, double*, bool*, mstro_timestamp*, mstro_blob*, as the schema types
 *  the key), except: str() values are the const char* itself, and
 *  MSTRO_ATTR_CORE_CDO_RAW_PTR is the data pointer itself (lent, never copied: offered in
 *  place; with SCOPE_LOCAL_SIZE (int64_t*) its length).
 *  copy_value: read the value now; otherwise the pointer is kept and read at seal, so it
 *  must stay valid until then. user_owned_value: the caller keeps ownership; when false
 *  and copy_value is false, the library free()s `val` at dispose (it must come from
 *  malloc). When copy_value is true the library never frees `val`.
 *  MSTRO_NOENT for a key in no schema (MSTRO_DROP_UNKNOWN_ATTRIBUTES=1: dropped, MSTRO_OK);
 *  MSTRO_INVARG for NULL arguments or bad values; MSTRO_INVSTATE after seal or demand. */
mstro_status mstro_cdo_attribute_set(mstro_cdo cdo, const char *key, void *val, bool copy_value,
                                     bool user_owned_value);

/** Reads attribute `key`: staged values before seal; after demand, the attributes the
 *  CDO was sealed with (with name and local-size). *valtype (may be NULL) gets the type,
 *  *val_p a pointer to the value (or the const char* / the data pointer itself, see
 *  enum mstro_cdo_attr_value_type), valid until the attribute is set again or the CDO is
 *  disposed. MSTRO_NOENT if not set; MSTRO_INVARG for NULL arguments or a bad handle. */
mstro_status mstro_cdo_attribute_get(mstro_cdo cdo, const char *key,
                                     enum mstro_cdo_attr_value_type *valtype, const void **val_p);

/** Freezes the attributes, checking them against the schemas (defaults filled in).
 *  MSTRO_INVARG for attributes the schemas refuse (the message names the key);
 *  MSTRO_INVSTATE if sealed already. */
mstro_status mstro_cdo_seal(mstro_cdo cdo);

/** Offers a sealed CDO: its bytes are the raw-ptr memory, registered with the fabric in
 *  place (no copy) and read by consumers until mstro_cdo_withdraw returns; do not write it
 *  until then. Without raw-ptr, a 0-byte CDO. MSTRO_INVSTATE unless sealed; MSTRO_INVARG
 *  for raw-ptr without local-size. */
mstro_status mstro_cdo_offer(mstro_cdo cdo);

/** Declares the intent to demand: the pool may move the CDO here as soon as it is offered.
 *  MSTRO_INVSTATE unless declared. */
mstro_status mstro_cdo_require(mstro_cdo cdo);

/** Waits until the CDO is here (at most MSTRO_TIMEOUT seconds, default 300). With raw-ptr
 *  and local-size set before, the bytes are copied into that buffer; otherwise
 *  mstro_cdo_access_ptr gives library memory valid until dispose.
 *  MSTRO_TIMEOUT if nobody offered it (the demand stands); MSTRO_NOENT if its providers
 *  vanished; MSTRO_INVARG if the buffer given is too small; MSTRO_INVSTATE if demanded. */
mstro_status mstro_cdo_demand(mstro_cdo cdo);

/** Cancels a require. MSTRO_INVSTATE if not required or already moving. */
mstro_status mstro_cdo_retract(mstro_cdo cdo);

/** An asynchronous demand in flight. */
typedef struct mstro_request_ *mstro_request;

/** Starts demanding the CDO in the background and returns at once, its request in
 *  *request: as many demands may be in flight from one thread as the program likes. Until
 *  the request is waited for (or tested true) the CDO is not demanded; until it is
 *  disposed, the CDO cannot be demanded again or disposed (MSTRO_INVSTATE).
 *  MSTRO_INVSTATE if demanded already or a request of it is in flight; MSTRO_INVARG for a
 *  NULL request pointer or a bad handle. */
mstro_status mstro_cdo_demand_async(mstro_cdo cdo, mstro_request *request);

/** Whether the request finished, well or not (mstro_request_wait then says which); once
 *  it did, the CDO is demanded as after mstro_cdo_demand. Never waits. false for a bad
 *  handle (logged). */
bool mstro_request_test(mstro_request request);

/** Waits until the request finished (at most MSTRO_TIMEOUT seconds) and returns the
 *  demand's status, as mstro_cdo_demand would (MSTRO_TIMEOUT, MSTRO_NOENT, ...); again the
 *  same status when called again. MSTRO_INVARG for a bad handle. */
mstro_status mstro_request_wait(mstro_request request);

/** Forgets the request; one still in flight is cancelled and its demand retracted (the
 *  CDO may be demanded again; bytes already on their way are kept for that demand).
 *  MSTRO_INVARG for a bad or disposed handle. */
mstro_status mstro_request_dispose(mstro_request request);

/** Takes an offer back once no transfer reads it (and no consumer in this process holds
 *  it); then the raw-ptr memory is the caller's again. MSTRO_INVSTATE unless offered. */
mstro_status mstro_cdo_withdraw(mstro_cdo cdo);

/* ---- CDO groups ------------------------------------------------------------------------
 * A group is a named set of CDOs offered, demanded and withdrawn together. The producer
 * declares a group, adds CDOs it declared (not offered), may fix the size it expects,
 * seals and offers it: members not sealed yet are sealed with their attributes, and all of
 * them go in one burst, all or nothing. The consumer declares a group of the same name and
 * demands it: every member arrives, then mstro_group_next hands out their CDO handles in
 * the producer's order; they belong to the group and go with mstro_group_dispose. Members
 * are ordinary CDOs: selectors and events see each of them (the group itself is a 0-byte
 * CDO with .maestro.core.cdo.isgroup true listing them in .maestro.core.cdo.group.members). */

/** A group of CDOs. */
typedef struct mstro_group_ *mstro_group;

/** Declares a group named `name` (producer and consumer alike). MSTRO_INVARG for a NULL,
 *  empty or over-long name or a NULL result pointer. */
mstro_status mstro_group_declare(const char *name, mstro_group *group);

/** Adds `member`, a CDO this process declared and did not offer, before the group's seal.
 *  MSTRO_INVSTATE after seal; MSTRO_INVARG for a bad handle or a CDO added already. */
mstro_status mstro_group_add(mstro_group group, mstro_cdo member);

/** Says how many members the group will have; its seal checks it. MSTRO_INVSTATE after
 *  seal. */
mstro_status mstro_group_size_set(mstro_group group, size_t size);

/** The group's size in *size: its members once sealed or demanded; before, the size set,
 *  else the members added so far. MSTRO_INVARG for a NULL pointer or a bad handle. */
mstro_status mstro_group_size_get(mstro_group group, size_t *size);

/** Seals the group: its members are fixed. MSTRO_INVSTATE unless declared; MSTRO_INVARG
 *  for a group without members or whose members differ in number from the size set. */
mstro_status mstro_group_seal(mstro_group group);

/** Offers the group and its members in one burst (members not sealed are sealed with their
 *  attributes), all or nothing: when one is refused nothing stays offered. MSTRO_INVSTATE
 *  unless sealed, or for a member offered or demanded already. */
mstro_status mstro_group_offer(mstro_group group);

/** Declares the intent to demand the group (a consumer's: declared, no members added).
 *  MSTRO_INVSTATE otherwise. */
mstro_status mstro_group_require(mstro_group group);

/** Waits until the group and all its members are here (at most MSTRO_TIMEOUT for each).
 *  MSTRO_INVSTATE if demanded already or members were added (a producer's group);
 *  MSTRO_TIMEOUT when nobody offers it in time; MSTRO_INVARG when the CDO of that name is
 *  no group. */
mstro_status mstro_group_demand(mstro_group group);

/** The next member in *member (NULL after the last; the next call starts over): a
 *  demanded group's members in the producer's order, or a producer's in the order added.
 *  MSTRO_INVSTATE for a consumer's group not demanded yet. */
mstro_status mstro_group_next(mstro_group group, mstro_cdo *member);

/** Takes back an offered group and its members. MSTRO_INVSTATE unless offered. */
mstro_status mstro_group_withdraw(mstro_group group);

/** Cancels a group's require. MSTRO_INVSTATE unless required. */
mstro_status mstro_group_retract(mstro_group group);

/** Forgets the group, and the members its demand brought (a producer's members stay the
 *  program's). MSTRO_INVSTATE while offered (withdraw first). */
mstro_status mstro_group_dispose(mstro_group group);

/** Forgets the CDO; the handle is invalid afterwards. MSTRO_INVSTATE while offered
 *  (withdraw first); MSTRO_INVARG for a bad handle. */
mstro_status mstro_cdo_dispose(mstro_cdo cdo);

/** Allocates len bytes (zeroed, page-aligned) for CDO data into *ptr. Lent as a CDO's
 *  raw-ptr like any memory, it is offered from a memory file where that pays (from 1 MiB
 *  where the system gives shared memory huge pages, from 16 MiB elsewhere), and consumers
 *  on this node then map these very pages instead of copying them. Once the CDO is
 *  withdrawn the memory is the caller's again (later writes never reach the consumers;
 *  offered again, it is copied like plain memory). Free with mstro_mem_free.
 *  MSTRO_INVARG for 0 bytes or a NULL ptr; MSTRO_NOMEM. (Not in Maestro Core.) */
mstro_status mstro_mem_alloc(size_t len, void **ptr);

/** Frees memory of mstro_mem_alloc (withdraw the CDOs lending it first; consumers' views
 *  keep their bytes). MSTRO_INVARG for any other pointer or a second free. */
mstro_status mstro_mem_free(void *ptr);

/** The CDO's bytes after demand (or the raw-ptr memory): *data and *data_len (either may
 *  be NULL), valid until dispose. Bytes of a provider in this process are its memory (no
 *  copy): read only. MSTRO_INVSTATE before demand. */
mstro_status mstro_cdo_access_ptr(mstro_cdo cdo, void **data, int64_t *data_len);

/* ---------------------------------------------------------------- selectors and events */

/** Schemas for selectors (only NULL: the schemas of MSTRO_SCHEMA_PATH/LIST). */
typedef struct mstro_schema_ *mstro_schema;
/** A selector handle. */
typedef struct mstro_cdo_selector_ *mstro_cdo_selector;
/** A subscription handle. */
typedef struct mstro_subscription_ *mstro_subscription;

/** Parses a selector: Maestro's s-expressions over attributes, e.g.
 *  "(and (has .maestro.core.cdo.name) (.maestro.ecmwf.step = 2))": (has K), (K = V) and
 *  != < <= > >=, (K ~= "regex"), (and ...), (or ...), (not X); keys without a leading '.'
 *  are relative to `nspace` (may be NULL). MSTRO_INVARG if it does not parse:
 *  mstro_last_error_message() points at the column. */
mstro_status mstro_cdo_selector_create(mstro_schema schema, const char *nspace,
                                       const char *query, mstro_cdo_selector *result);

/** Frees a selector; subscriptions made with it go on. */
mstro_status mstro_cdo_selector_dispose(mstro_cdo_selector s);

/** Event kinds: bits of mstro_pool_event_kinds. */
enum mstro_pool_event_kind {
  MSTRO_POOL_EVENT_NONE = 0,
  MSTRO_POOL_EVENT_DECLARE = 1 << 0,
  MSTRO_POOL_EVENT_SEAL = 1 << 1,
  MSTRO_POOL_EVENT_OFFER = 1 << 2,
  MSTRO_POOL_EVENT_REQUIRE = 1 << 3,
  MSTRO_POOL_EVENT_DEMAND = 1 << 4,
  MSTRO_POOL_EVENT_WITHDRAW = 1 << 5,
  MSTRO_POOL_EVENT_RETRACT = 1 << 6,
  MSTRO_POOL_EVENT_DISPOSE = 1 << 7,
  MSTRO_POOL_EVENT_APP_JOIN = 1 << 8,
  MSTRO_POOL_EVENT_APP_LEAVE = 1 << 9,
  MSTRO_POOL_EVENT_TRANSPORT_STARTED = 1 << 10,   /**< the PM ticketed a transfer */
  MSTRO_POOL_EVENT_TRANSPORT_COMPLETED = 1 << 11, /**< a transfer completed or failed */
  MSTRO_POOL_EVENT_FABRIC = 1 << 12,              /**< a link went down/up, a node or process was lost */
  MSTRO_POOL_EVENT_PM_FAILOVER = 1 << 13          /**< another pool manager took over; the detail says which apps did not come back */
};
/** A set of event kinds (OR of enum mstro_pool_event_kind). */
typedef uint32_t mstro_pool_event_kinds;

/** Subscription options (OR them). */
enum mstro_subscription_opts_ {
  MSTRO_SUBSCRIPTION_OPTS_DEFAULT = 0,
  MSTRO_SUBSCRIPTION_OPTS_SIGNAL_BEFORE = 1 << 0, /**< the event comes before the operation */
  MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK = 1 << 1,   /**< the operation waits for mstro_subscription_ack */
  MSTRO_SUBSCRIPTION_OPTS_NO_LOCAL_EVENTS = 1 << 2, /**< nothing this application caused */
  /** First an event for every live CDO that matches, of the kind its state stands for
      (declared: DECLARE, sealed: SEAL, offered: OFFER, required: REQUIRE, demanded: DEMAND,
      withdrawn: WITHDRAW; detail "before this subscription"; at most 100000, lowest ids
      first), then events as they happen: a late subscriber misses nothing offered before.
      With SIGNAL_BEFORE the past events come after the fact (no acknowledgement needed),
      then each new one before its operation. An extension of Maestro Core's options. */
  MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE = 1 << 3
};
typedef uint32_t mstro_subscription_opts;

/** Payload of CDO events (declare ... dispose, transport). */
struct mstro_pool_event_cdo {
  const char *cdo_name;       /**< the CDO's name */
  uint64_t appid;             /**< the application that caused it */
  const char *component_name; /**< its component name */
  int64_t component_index;    /**< its component index */
  const char *detail;         /**< e.g. the transport used, or why it failed ("" if none) */
};

/** Payload of application and fabric events. */
struct mstro_pool_event_app {
  uint64_t appid;             /**< the application (0 for fabric events) */
  const char *component_name; /**< its component name (also on leave) */
  int64_t component_index;    /**< its component index */
  const char *detail;         /**< why it left; what changed in the fabric ("" if none) */
};

/** The payload by kind. */
union mstro_pool_event_payload {
  struct mstro_pool_event_cdo declare, seal, offer, require, demand, withdraw, retract, dispose,
      transport;
  struct mstro_pool_event_app join, leave, fabric;
};

/** One event; poll and wait return a list linked by `next`. Payload fields are spelled
 *  ev->payload.offer.cdo_name or ev->offer.cdo_name (the same memory). Strings live as
 *  long as the event (until mstro_pool_event_dispose). */
struct mstro_pool_event_ {
  enum mstro_pool_event_kind kind;
  uint64_t serial;                /**< pool-wide, increasing */
  int64_t time_ns;                /**< when the PM saw it, nanoseconds since the Unix epoch */
  bool before;                    /**< delivered before the operation took effect */
  bool needs_ack;                 /**< the operation waits for mstro_subscription_ack */
  struct mstro_pool_event_ *next; /**< the next event of the list, or NULL */
  MSTRO_EXTENSION_ union {
    union mstro_pool_event_payload payload;
    struct mstro_pool_event_cdo declare, seal, offer, require, demand, withdraw, retract,
        dispose, transport;
    struct mstro_pool_event_app join, leave, fabric;
  };
};
typedef struct mstro_pool_event_ *mstro_pool_event;

/** Subscribes to events of `kinds` matching `sel` (NULL: every CDO; app and fabric events
 *  pass by kind) with `opts`. MSTRO_INVARG for an empty or unknown kind mask, unknown
 *  option bits or bad handles. */
mstro_status mstro_subscribe(mstro_cdo_selector sel, mstro_pool_event_kinds kinds,
                             mstro_subscription_opts opts, mstro_subscription *result);

/** Every event queued now, as one list in *event_p (NULL when none), without waiting.
 *  MSTRO_NO_PM when the connection ended and nothing is left. */
mstro_status mstro_subscription_poll(mstro_subscription s, mstro_pool_event *event_p);

/** Waits for events (at most MSTRO_TIMEOUT seconds: then MSTRO_TIMEOUT), then returns every
 *  event queued as one list in *event_p. */
mstro_status mstro_subscription_wait(mstro_subscription s, mstro_pool_event *event_p);

/** As mstro_subscription_wait, until the absolute CLOCK_REALTIME time `abstime`
 *  (MSTRO_TIMEOUT then, *event_p NULL). */
mstro_status mstro_subscription_timedwait(mstro_subscription s, const struct timespec *abstime,
                                          mstro_pool_event *event_p);

/** Acknowledges every event of the list `event` that needs it. MSTRO_TIMEOUT if the PM
 *  stopped waiting for one of them already (the others are acknowledged). */
mstro_status mstro_subscription_ack(mstro_subscription s, mstro_pool_event event);

/** Ends a subscription; operations held for its acknowledgements go on. */
mstro_status mstro_subscription_dispose(mstro_subscription s);

/** Frees an event list (every event linked from `e`). MSTRO_INVARG for a pointer that is
 *  not a live event list. */
mstro_status mstro_pool_event_dispose(mstro_pool_event e);

/** The kind's name ("offer", "app-join", ...; static storage; "invalid" for others). */
const char *mstro_pool_event_description(enum mstro_pool_event_kind kind);

/* ---------------------------------------------------------------- pool manager */

/** The variable the PM info goes in for other processes. */
#define MSTRO_ENV_POOL_INFO "MSTRO_POOL_MANAGER_INFO"

/** Makes this process the workflow's pool manager (call it right after mstro_init): it
 *  listens on every interface and a private Unix socket, and under a PMIx host announces
 *  itself (job key and published name; JOINs must then carry the host's credential where
 *  it issues them). This process joins it, so its subscriptions see every app's events.
 *  MSTRO_NOT_TWICE if it serves already or joined a pool; MSTRO_FAIL if it cannot start. */
mstro_status mstro_pm_start(void);

/** The PM info of the pool manager this process serves, in a new string the caller
 *  free()s. It carries the workflow secret: keep it to the workflow's processes.
 *  MSTRO_INVSTATE if this process serves none. */
mstro_status mstro_pm_getinfo(char **info);

/** Stops the pool manager this process serves; other apps' connections close. Later pool
 *  operations here return MSTRO_NO_PM until mstro_finalize. MSTRO_INVSTATE if none. */
mstro_status mstro_pm_terminate(void);

#ifdef __cplusplus
}
#endif

#endif /* MAESTRO_H */
