// gl-emu stand-in for the CUDA runtime header (see gl_emu.h).
#pragma once
#include "gl_emu.h"
