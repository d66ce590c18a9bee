// ESLint (flat config): the recommended JavaScript and TypeScript rules, checked in CI by `npm run lint`.
// Formatting is Prettier's (`npm run format:check`); type errors are tsc's (`npm run typecheck`).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', '.tools/', '.runs/', 'runs/', 'gpu-learner/build*/', 'gpu-learner/emu/build/', 'test/fixtures/', 'checks/testlogs/suites/', 'tmp/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        setImmediate: 'readonly',
        URL: 'readonly',
        fetch: 'readonly',
        AbortSignal: 'readonly',
        performance: 'readonly',
        structuredClone: 'readonly',
        TextDecoder: 'readonly',
        TextEncoder: 'readonly',
      },
    },
    rules: {
      // `_name` marks a deliberately unused binding (tsc's noUnused* checks the rest)
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', caughtErrors: 'none' }],
      // our rethrown errors carry their cause's message; a `cause` would also travel in every Temporal failure
      // of an activity (a second copy of the message in history and in evaluation error records)
      'preserve-caught-error': 'off',
    },
  },
  {
    // tests read arbitrary JSON from servers and stores
    files: ['test/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
);
