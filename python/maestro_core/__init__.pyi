"""Type stubs of maestro_core (see the module docstring)."""

from typing import Any, ContextManager, List, Optional, Union

class MaestroError(Exception):
    """A Maestro call failed."""

    status: int
    """The MSTRO_* status."""
    message: str
    """What was wrong and what to do."""

class Cdo:
    """A CDO handle."""

    name: str

class Selector:
    """A selector handle."""

class DemandedBytes:
    """What keeps demanded bytes alive under a view of ``mstro_cdo_access_ptr`` (internal)."""

class Allocation:
    """Memory of ``mstro_mem_alloc`` under its view, freed with the last one (internal)."""

class Request:
    """An asynchronous demand in flight (``mstro_request``)."""
    name: str

class Subscription:
    """A subscription handle."""

class Group:
    """A group of CDOs (``mstro_group``)."""

    name: str

class CdoPayload:
    """Payload of CDO events (declare ... dispose, transport)."""

    cdo_name: str
    appid: int
    component_name: str
    component_index: int
    detail: str

class AppPayload:
    """Payload of application and fabric events."""

    appid: int
    component_name: str
    component_index: int
    detail: str

class Payload:
    """An event's payload by kind."""

    declare: CdoPayload
    seal: CdoPayload
    offer: CdoPayload
    require: CdoPayload
    demand: CdoPayload
    withdraw: CdoPayload
    retract: CdoPayload
    dispose: CdoPayload
    transport: CdoPayload
    join: AppPayload
    leave: AppPayload
    fabric: AppPayload
    failover: AppPayload

class Event:
    """One pool event."""

    kind: int
    serial: int
    time_ns: int
    before: bool
    needs_ack: bool
    payload: Payload

MSTRO_OK: int
MSTRO_FAIL: int
MSTRO_INVARG: int
MSTRO_NOMEM: int
MSTRO_UNIMPL: int
MSTRO_NOT_TWICE: int
MSTRO_TIMEOUT: int
MSTRO_NOENT: int
MSTRO_UNINIT: int
MSTRO_NO_PM: int
MSTRO_INVSTATE: int

MSTRO_POOL_EVENT_NONE: int
MSTRO_POOL_EVENT_DECLARE: int
MSTRO_POOL_EVENT_SEAL: int
MSTRO_POOL_EVENT_OFFER: int
MSTRO_POOL_EVENT_REQUIRE: int
MSTRO_POOL_EVENT_DEMAND: int
MSTRO_POOL_EVENT_WITHDRAW: int
MSTRO_POOL_EVENT_RETRACT: int
MSTRO_POOL_EVENT_DISPOSE: int
MSTRO_POOL_EVENT_APP_JOIN: int
MSTRO_POOL_EVENT_APP_LEAVE: int
MSTRO_POOL_EVENT_TRANSPORT_STARTED: int
MSTRO_POOL_EVENT_TRANSPORT_COMPLETED: int
MSTRO_POOL_EVENT_FABRIC: int
MSTRO_POOL_EVENT_PM_FAILOVER: int

MSTRO_SUBSCRIPTION_OPTS_DEFAULT: int
MSTRO_SUBSCRIPTION_OPTS_SIGNAL_BEFORE: int
MSTRO_SUBSCRIPTION_OPTS_REQUIRE_ACK: int
MSTRO_SUBSCRIPTION_OPTS_NO_LOCAL_EVENTS: int
MSTRO_SUBSCRIPTION_OPTS_CURRENT_STATE: int

MSTRO_ATTR_DEFAULT: None
MSTRO_ATTR_CORE_CDO_NAME: str
MSTRO_ATTR_CORE_CDO_RAW_PTR: str
MSTRO_ATTR_CORE_CDO_SCOPE_LOCAL_SIZE: str
MSTRO_ATTR_CORE_CDO_LAYOUT_ORDER: str
MSTRO_ATTR_CORE_CDO_LAYOUT_ELEMENT_SIZE: str
MSTRO_ATTR_CORE_CDO_LAYOUT_NDIMS: str
MSTRO_ATTR_CORE_CDO_LAYOUT_DIMS_SIZE: str
MSTRO_ATTR_CORE_CDO_LIFETIME: str
MSTRO_ATTR_CORE_CDO_PERSIST: str
MSTRO_ATTR_CORE_CDO_TRANSPORT: str
MSTRO_ATTR_CORE_CDO_ISGROUP: str
MSTRO_ATTR_CORE_CDO_PROVIDER: str
MSTRO_ATTR_CORE_CDO_INTEGRITY: str
MSTRO_ATTR_CORE_CDO_CHECKSUM: str
MSTRO_ENV_POOL_INFO: str

def mstro_init(workflow: Optional[str] = None, component: Optional[str] = None, index: int = 0) -> None:
    """Starts Maestro in this process; None names come from MSTRO_WORKFLOW_NAME / MSTRO_COMPONENT_NAME.
    Raises MaestroError (MSTRO_NOT_TWICE if initialized, MSTRO_INVARG for bad names or variables)."""

def mstro_finalize() -> None:
    """Ends Maestro in this process: leaves the pool, forgets every handle. MSTRO_UNINIT if not initialized."""

def mstro_version() -> str:
    """This library's version."""

def mstro_clock() -> int:
    """Nanoseconds on a monotonic clock."""

def mstro_status_description(status: int) -> str:
    """The description of an MSTRO_* status."""

def mstro_cdo_declare(name: str, attributes: None = None) -> Cdo:
    """Declares a CDO (joins the pool on first use). MSTRO_INVARG for a bad name."""

def mstro_cdo_seal(cdo: Cdo) -> None:
    """Freezes the attributes, checked against the schemas. MSTRO_INVARG names the attribute refused."""

def mstro_cdo_offer(cdo: Cdo) -> None:
    """Offers the CDO; its raw-ptr buffer is offered in place. MSTRO_INVSTATE unless sealed."""

def mstro_cdo_require(cdo: Cdo) -> None:
    """Declares the intent to demand: the pool may move the CDO here as soon as offered."""

def mstro_cdo_demand(cdo: Cdo) -> None:
    """Waits (GIL released, at most MSTRO_TIMEOUT) until the CDO is here. MSTRO_TIMEOUT, MSTRO_NOENT (providers gone)."""

def mstro_cdo_demand_async(cdo: Cdo) -> Request:
    """Starts demanding the CDO in the background and returns at once. MSTRO_INVSTATE if demanded or a request of it is in flight."""

def mstro_request_test(request: Request) -> bool:
    """Whether the request finished, well or not (mstro_request_wait says which); the CDO is then demanded. Never waits."""

def mstro_request_wait(request: Request) -> None:
    """Waits (GIL released, at most MSTRO_TIMEOUT; Ctrl-C raises KeyboardInterrupt and leaves it in flight) and raises the demand's error, if any."""

def mstro_request_dispose(request: Request) -> None:
    """Forgets the request, cancelling it (the demand retracted) if still in flight."""

async def mstro_request_wait_async(request: Request, poll: float = 0.0005) -> None:
    """Awaits the request from asyncio without blocking the event loop."""

def mstro_group_declare(name: str) -> Group:
    """Declares a group named ``name`` (producer and consumer alike)."""

def mstro_group_add(group: Group, cdo: Cdo) -> None:
    """Adds a CDO this process declared (not offered) before the group's seal. MSTRO_INVSTATE after seal; MSTRO_INVARG for a CDO added already."""

def mstro_group_size_set(group: Group, size: int) -> None:
    """Says how many members the group will have; its seal checks it. MSTRO_INVSTATE after seal."""

def mstro_group_size_get(group: Group) -> int:
    """The group's size: its members once sealed or demanded; before, the size set, else the members added so far."""

def mstro_group_seal(group: Group) -> None:
    """Seals the group. MSTRO_INVARG for a group without members or whose members differ in number from the size set."""

def mstro_group_offer(group: Group) -> None:
    """Offers the group and its members (members not sealed are sealed) in one burst, all or nothing. MSTRO_INVSTATE unless sealed."""

def mstro_group_require(group: Group) -> None:
    """Declares the intent to demand the group."""

def mstro_group_demand(group: Group) -> None:
    """Waits (GIL released) until the group and all its members are here. MSTRO_TIMEOUT; MSTRO_INVARG when the CDO of that name is no group."""

def mstro_group_next(group: Group) -> Optional[Cdo]:
    """The next member in the producer's order, None after the last (the next call starts over). MSTRO_INVSTATE before a consumer's demand."""

def mstro_group_withdraw(group: Group) -> None:
    """Takes back an offered group and its members."""

def mstro_group_retract(group: Group) -> None:
    """Cancels a group's require."""

def mstro_group_dispose(group: Group) -> None:
    """Forgets the group and the members its demand brought. MSTRO_INVSTATE while offered."""

def mstro_cdo_retract(cdo: Cdo) -> None:
    """Cancels a require."""

def mstro_cdo_withdraw(cdo: Cdo) -> None:
    """Takes the offer back once no transfer reads it; the buffer is the program's again."""

def mstro_cdo_dispose(cdo: Cdo) -> None:
    """Forgets the CDO. MSTRO_INVSTATE while offered (withdraw first)."""

def mstro_cdo_attribute_set(cdo: Cdo, key: str, value: Any) -> None:
    """Sets an attribute typed by the schemas (int, float, bool, str, bytes, timestamp as int ns or datetime).
    For MSTRO_ATTR_CORE_CDO_RAW_PTR: any contiguous buffer, offered in place and kept alive until dispose."""

def mstro_cdo_attribute_get(cdo: Cdo, key: str, valtype: Any = None) -> Any:
    """An attribute's value; MSTRO_ATTR_CORE_CDO_RAW_PTR gives the data's address. MSTRO_NOENT if not set."""

def mstro_cdo_attributes(cdo: Cdo) -> dict:
    """Every attribute as a dict."""

def mstro_cdo_attributes_print(cdo: Cdo) -> None:
    """Prints every attribute, one `key = value` per line."""

def mstro_cdo_access_ptr(cdo: Cdo) -> memoryview:
    """The demanded bytes as a read-only memoryview, no copy. MSTRO_INVSTATE before demand."""

def mstro_mem_alloc(size: int) -> memoryview:
    """Writable memory for CDO data that consumers on this node map instead of copying once
    lent as raw-ptr; freed when the view is. MSTRO_INVARG for 0 bytes."""

def mstro_cdo_selector_create(schema: None, nspace: Optional[str], query: str) -> Selector:
    """Parses a selector; MSTRO_INVARG with the column of the problem."""

def mstro_cdo_selector_dispose(sel: Selector) -> None:
    """Frees a selector."""

def mstro_subscribe(sel: Optional[Selector], kinds: int, opts: int) -> Subscription:
    """Subscribes to events of `kinds` matching `sel` with `opts`."""

def mstro_subscription_poll(sub: Subscription) -> Optional[List[Event]]:
    """Every event queued now, or None."""

def mstro_subscription_wait(sub: Subscription, timeout: Optional[float] = None) -> Optional[List[Event]]:
    """Waits (GIL released) for events; None after `timeout` seconds; without, MSTRO_TIMEOUT after MSTRO_TIMEOUT."""

def mstro_subscription_ack(sub: Subscription, events: Union[Event, List[Event]]) -> None:
    """Acknowledges the events that need it. MSTRO_TIMEOUT if the PM stopped waiting."""

def mstro_subscription_dispose(sub: Subscription) -> None:
    """Ends a subscription."""

def mstro_pool_event_description(kind: int) -> str:
    """The name of an event kind ("offer", "app-join", ...)."""

def mstro_pm_start() -> None:
    """Makes this process the workflow's pool manager and joins it."""

def mstro_pm_getinfo() -> str:
    """The PM info (for MSTRO_POOL_MANAGER_INFO) of the PM this process serves."""

def mstro_pm_terminate() -> None:
    """Stops the pool manager this process serves."""

def pool(workflow: Optional[str] = None, component: Optional[str] = None, index: int = 0) -> ContextManager[None]:
    """mstro_init on entry, mstro_finalize on exit."""

def cdo(name: str) -> ContextManager[Cdo]:
    """A declared CDO for the block; withdrawn if offered, then disposed, on exit."""
