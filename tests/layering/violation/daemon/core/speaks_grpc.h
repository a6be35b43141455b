#pragma once
// Deliberately wrong, for the test of the layering check: gRPC in the core.
#include "grpcpp/grpcpp.h"
