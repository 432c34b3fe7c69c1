// Fixture: an include that the exceptions table allows for this file only.
#include "format/gguf.h"
