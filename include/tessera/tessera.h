// Tessera's public C++ API: everything a program needs, in one include.
//
//   #include <tessera/tessera.h>
//
//   tessera::Result<tessera::Runtime> rt = tessera::connect();          // this process
//   tessera::Result<tessera::Model> m = rt->compile("model.onnx");        // or a .tsx
//   tessera::Result<tessera::Session> s = m->session({.veus = 2});       // placed on 2 cores
//   tessera::Result<tessera::NamedTensors> out = s->run(inputs);         // model order
//
// The headers, each with its ownership and thread-safety rules:
//   tessera/status.h   Status and Result<T>: how every fallible call fails
//   tessera/dtype.h    DType: element types
//   tessera/tensor.h   Tensor: owned or borrowed bytes with a dtype and shape
//   tessera/runtime.h  Runtime, Model, Session, Event and their options
//   tessera/inspect.h  what a model holds, its Plan, its rTasks' costs, a device's ops
//   tessera/host_map.h the host map: PUs and the measured costs between them
//   tessera/log.h      how much the library says on stderr
//
// C++20. Link with Tessera::tessera (CMake: find_package(Tessera)) or
// `pkg-config --cflags --libs tessera`. docs/api.md is a tour.
#pragma once

#include <cstdio>  // the examples print with std::printf

#include "tessera/daemon.h"
#include "tessera/dtype.h"
#include "tessera/host_map.h"
#include "tessera/inspect.h"
#include "tessera/log.h"
#include "tessera/runtime.h"
#include "tessera/status.h"
#include "tessera/tensor.h"
