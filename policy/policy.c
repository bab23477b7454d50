/* Parsing and validation of the networkPolicy document (stub). */
#include "policy/policy.h"
