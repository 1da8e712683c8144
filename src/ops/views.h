/* Views (ops/views.c): no ops of their own besides the engine's storage and view, whose
   entries they hold. */
#ifndef WGML_OPS_VIEWS_H
#define WGML_OPS_VIEWS_H

#define WGML_VIEWS_OPS(X)

#endif
