/* Everything pmix-sys binds: the client, server and tool APIs plus our macro shim. */
#include <pmix.h>
#include <pmix_server.h>
#include <pmix_tool.h>
#include "shim.h"
