/* What the bindings cover: libibnetdisc's discovery API and the libibmad field decoder
 * (mad_get_field) that reads the node and port records it returns. */
#include <infiniband/ibnetdisc.h>
#include <infiniband/mad.h>
