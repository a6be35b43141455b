#pragma once
// Deliberately wrong, for the test of the layering check: a backend header
// that reaches up into the registry.
#include "daemon/core/registry.h"
