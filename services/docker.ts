// The Docker engine as swerl reaches it: one client per process (DOCKER_HOST or the default socket), and the
// image query the cluster's loader and the image builder share.
import Docker from 'dockerode';

let dockerSingleton: Docker | undefined;
export function defaultDocker(): Docker {
  dockerSingleton ??= new Docker();
  return dockerSingleton;
}

export async function imageExists(name: string, docker: Docker = defaultDocker()): Promise<boolean> {
  try {
    await docker.getImage(name).inspect();
    return true;
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode === 404) return false;
    throw e;
  }
}
