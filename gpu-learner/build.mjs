// Placeholder until the native build lands: builds nothing when there is no CMakeLists.txt.
import { existsSync } from 'node:fs';
if (!existsSync(new URL('./CMakeLists.txt', import.meta.url))) {
  console.log('gpu-learner: no CMakeLists.txt yet, skipping native build');
}
