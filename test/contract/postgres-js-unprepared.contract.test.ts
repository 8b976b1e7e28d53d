import { postgresJsTarget } from '../support/driver-targets.js';
import { describeStoreContract } from './suite.js';

await describeStoreContract(postgresJsTarget({ preparedStatements: false }));
