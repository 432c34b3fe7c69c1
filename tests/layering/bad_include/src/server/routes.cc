// Fixture for the `layering_catches_bad_include` test: a server file that reaches into the model
// layer, which docs/design.md's layer table forbids (scripts/check_layers.sh must report it).
#include "server/routes.h"
#include "engine/engine_client.h"
#include "model/llama.h"
