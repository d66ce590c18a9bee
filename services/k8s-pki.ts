// The local cluster's certificates, made once per state directory with the openssl CLI (Node can make
// keys but not X.509 certificates): a CA, the API server's serving certificate, client certificates for
// the admin (group system:masters: users, tests, controller-manager, scheduler, the API server's calls to
// the kubelet) and the node (system:node:localhost, as the Node authorizer expects), and the service
// account signing key. ECDSA P-256 throughout; valid ten years.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync, rmSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { NODE_NAME, SERVICE_IP } from './k8s-cluster-config.ts';

const run = promisify(execFile);
const DAYS = '3650';

async function openssl(args: string[], cwd: string): Promise<void> {
  try {
    await run('openssl', args, { cwd });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`openssl ${args[0]} failed: ${err.stderr?.trim() || err.message}`);
  }
}

/** A key and a certificate signed by the CA in `dir`, with the given subject and extensions. */
async function signed(dir: string, name: string, subject: string, ext: string): Promise<void> {
  await openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', `${name}.key`], dir);
  await openssl(['req', '-new', '-key', `${name}.key`, '-subj', subject, '-out', `${name}.csr`], dir);
  writeFileSync(join(dir, `${name}.ext`), ext);
  await openssl(
    ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', DAYS, '-sha256', '-extfile', `${name}.ext`, '-out', `${name}.crt`],
    dir,
  );
  rmSync(join(dir, `${name}.csr`));
  rmSync(join(dir, `${name}.ext`));
}

const CLIENT = 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n';

/** Makes the certificates in `dir` unless they are there (written into a temp directory, then renamed). */
export async function ensurePki(dir: string): Promise<void> {
  if (existsSync(join(dir, 'sa.pub'))) return;
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true, mode: 0o700 });
  await openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', 'ca.key'], tmp);
  await openssl(
    [
      'req',
      '-x509',
      '-new',
      '-key',
      'ca.key',
      '-subj',
      '/CN=swerl-local-k8s-ca',
      '-days',
      DAYS,
      '-sha256',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
      '-out',
      'ca.crt',
    ],
    tmp,
  );
  const sans = [
    'IP:127.0.0.1',
    `IP:${SERVICE_IP}`,
    'DNS:localhost',
    'DNS:kubernetes',
    'DNS:kubernetes.default',
    'DNS:kubernetes.default.svc',
    'DNS:kubernetes.default.svc.cluster.local',
  ];
  await signed(
    tmp,
    'apiserver',
    '/CN=kube-apiserver',
    `basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=${sans.join(',')}\n`,
  );
  await signed(tmp, 'admin', '/O=system:masters/CN=swerl-admin', CLIENT);
  await signed(tmp, 'node', `/O=system:nodes/CN=system:node:${NODE_NAME}`, CLIENT);
  await openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', 'sa.key'], tmp);
  await openssl(['pkey', '-in', 'sa.key', '-pubout', '-out', 'sa.pub'], tmp);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
}
