#pragma once
// Deliberately wrong, for the test of the layering check: a public header
// that includes an internal one.
#include "common/strings.h"
