// Stub: the implementation lands with its golden test (issue 36).
#include "models/qwen_image/qwen_text_encoder.h"
